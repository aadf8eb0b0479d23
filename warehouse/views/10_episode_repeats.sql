-- Repeats per episode, by the GRPO reward's rule (evoharness.training.reward.TrajectoryStats): a turn that issues
-- an action (a meta-action with its argument) already issued at the same environment observation earlier in the
-- episode. The observation is the last `env` step's (a meta-action's result does not change the world; before
-- the first env step it is ''). Invalid turns are never repeats but do count as issued. A looping policy is
-- what this measures: a lost game that ran out its budget going back and forth shows tens of repeats.
CREATE OR REPLACE VIEW episode_repeats AS
WITH placed AS (
    SELECT episode_id, t, kind, action,
           coalesce(last_value(CASE WHEN kind = 'env' THEN observation END IGNORE NULLS) OVER (
               PARTITION BY episode_id ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), '')
               AS at_observation
    FROM steps
),
numbered AS (
    SELECT episode_id, kind,
           row_number() OVER (PARTITION BY episode_id, action, at_observation ORDER BY t) AS issued
    FROM placed
)
SELECT e.episode_id,
       count(n.episode_id) FILTER (WHERE n.issued > 1 AND n.kind <> 'invalid') AS repeats
FROM episodes e
LEFT JOIN numbered n USING (episode_id)
GROUP BY e.episode_id;
