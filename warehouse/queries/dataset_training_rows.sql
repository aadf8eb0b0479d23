-- The training rows (view training_rows) a dataset holds ($dataset_id), with their train/validation split,
-- ordered by episode and turn.
SELECT t.*, de.dataset_split
FROM dataset_examples de
JOIN training_rows t USING (episode_id, consolidator, turn)
WHERE de.dataset_id = $dataset_id
ORDER BY t.episode_id, t.turn;
