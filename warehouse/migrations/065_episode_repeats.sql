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

-- 031's policy_evaluation with mean_repeats (over all episodes) and mean_repeats_lost (over lost finished ones:
-- how a policy loses), appended after its columns.
CREATE OR REPLACE VIEW policy_evaluation AS
SELECT
    e.teacher                                       AS policy,
    any_value(e.policy_kind) = 'student'            AS is_student,
    any_value(m.teacher)                            AS distilled_from,
    any_value(m.stage)                              AS stage,
    e.mode,
    e.max_steps,
    e.split,
    coalesce(e.task_type, 'ALL')                    AS task_type,
    count(*)                                        AS episodes,
    count(*) FILTER (WHERE e.status = 'failed')     AS failed,
    count(*) FILTER (WHERE e.won)                   AS won,
    metric_success_rate(count(*) FILTER (WHERE e.won), count(*) FILTER (WHERE e.status = 'finished'))
                                                    AS success_rate,
    round(avg(e.n_steps), 1)                        AS mean_steps,
    round(avg(e.n_harness_calls), 2)                AS mean_harness_calls,
    round(avg(e.n_invalid), 2)                      AS mean_invalid,
    sum(e.input_tokens)                             AS input_tokens,
    sum(e.output_tokens)                            AS output_tokens,
    round(sum(e.cost_usd), 6)                       AS cost_usd,
    any_value(e.policy_kind)                        AS policy_kind,
    count(*) FILTER (WHERE e.status = 'finished')   AS finished,
    round(avg(r.repeats), 2)                        AS mean_repeats,
    round(avg(r.repeats) FILTER (WHERE e.status = 'finished' AND NOT e.won), 1)
                                                    AS mean_repeats_lost
FROM episodes e
LEFT JOIN model_versions m ON m.model_version = e.model_version
LEFT JOIN episode_repeats r ON r.episode_id = e.episode_id
WHERE e.split IN ('valid_seen', 'valid_unseen')
GROUP BY e.teacher, e.mode, e.max_steps, e.split, ROLLUP (e.task_type);
