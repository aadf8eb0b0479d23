-- Turns per episode by game, for a teacher and the expert in one mode (finished episodes only): what a
-- dry run scales to the planned games.
SELECT teacher, game_id, count(*) AS episodes, avg(n_steps) AS mean_turns
FROM episodes
WHERE teacher IN ($teacher, 'expert') AND mode = $mode AND status = 'finished'
GROUP BY teacher, game_id;
