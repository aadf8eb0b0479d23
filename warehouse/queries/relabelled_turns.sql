-- The expert-labelled turns of one model version's relabelling episodes ($model_version), train games only,
-- with the game's catalog split (the curation guard checks it) and the run that collected them.
SELECT l.episode_id, l.turn, l.game_id, l.task_type, l.policy, l.run_id, l.label, l.turn_vars::VARCHAR AS turn_vars,
       l.agreed, g.split AS catalog_split
FROM expert_labels l
LEFT JOIN games g USING (game_id)
WHERE l.model_version = $model_version AND l.split = 'train'
ORDER BY l.episode_id, l.turn;
