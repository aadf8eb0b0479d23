-- A policy's lost games on one split at one step budget ($policy, $split, $max_steps), for
-- evoharness.evaluation.losses: each finished lost episode with its game's task, its length and repeats
-- (episode_repeats), and its environment turns in order as (action, observation) pairs. Meta-actions are left out:
-- they do not change the world.
SELECT e.episode_id, e.game_id, g.task_type, g.objective, e.n_steps, e.max_steps, coalesce(r.repeats, 0) AS repeats,
       coalesce(list(struct_pack(action := s.action, observation := s.observation) ORDER BY s.t)
                FILTER (WHERE s.kind = 'env'), []) AS env_turns
FROM episodes e
JOIN games g USING (game_id)
LEFT JOIN episode_repeats r USING (episode_id)
LEFT JOIN steps s USING (episode_id)
WHERE e.teacher = $policy AND e.split = $split AND e.max_steps = $max_steps AND e.status = 'finished' AND NOT e.won
GROUP BY ALL
ORDER BY e.game_id, e.episode_id;
