-- The training rows (view training_rows) of the episodes in the registered relation `_chosen` (episode_id,
-- dataset_split) for one $consolidator, ordered by episode and turn.
SELECT t.*, c.dataset_split
FROM training_rows t
JOIN _chosen c USING (episode_id)
WHERE t.consolidator = $consolidator
ORDER BY t.episode_id, t.turn;
