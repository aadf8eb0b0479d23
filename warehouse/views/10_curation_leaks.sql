-- Games of evaluation splits that reached a dataset. Must always be empty.
CREATE OR REPLACE VIEW curation_leaks AS
SELECT dg.dataset_id, dg.game_id, g.split
FROM dataset_games dg
LEFT JOIN games g USING (game_id)
WHERE g.split IS DISTINCT FROM 'train';
