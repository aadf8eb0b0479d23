-- Evaluation of every policy (teachers and student model versions alike) on the evaluation splits (dev, where
-- choices are made, and the held-out valid_seen and valid_unseen), per step
-- budget, split and task type (overall: 'ALL'), so a student reads side by side with the teacher it was
-- distilled from. Episodes played with different budgets are different evaluations, never averaged together.
-- mean_repeats (episode_repeats) is over all episodes, mean_repeats_lost over lost finished ones: how a
-- policy loses.
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
WHERE e.split IN ('dev', 'valid_seen', 'valid_unseen')
GROUP BY e.teacher, e.mode, e.max_steps, e.split, ROLLUP (e.task_type);
