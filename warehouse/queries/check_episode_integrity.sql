-- Integrity of one teacher's episodes ($teacher): each row is one violation.
WITH ep AS (SELECT * FROM episodes WHERE teacher = $teacher),
no_steps AS (
    SELECT episode_id, 'episode has no steps' AS problem
    FROM ep WHERE status = 'finished'
      AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.episode_id = ep.episode_id)
),
after_done AS (
    SELECT DISTINCT s.episode_id, 'step after done' AS problem
    FROM steps s JOIN ep USING (episode_id)
    WHERE EXISTS (SELECT 1 FROM steps d WHERE d.episode_id = s.episode_id AND d.done AND d.t < s.t)
),
won_not_done AS (
    SELECT ep.episode_id, 'won episode does not end with done' AS problem
    FROM ep JOIN steps s ON s.episode_id = ep.episode_id AND s.t = ep.n_steps - 1
    WHERE ep.won AND NOT s.done
),
failed_won AS (
    SELECT episode_id, 'failed episode stored as won' AS problem FROM ep WHERE status = 'failed' AND won
)
SELECT * FROM no_steps UNION ALL SELECT * FROM after_done
UNION ALL SELECT * FROM won_not_done UNION ALL SELECT * FROM failed_won
ORDER BY problem, episode_id;
