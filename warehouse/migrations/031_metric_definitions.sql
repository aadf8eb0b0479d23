-- One definition per metric, used by every view and query (docs/audit.md, "Metric definitions").
-- success_rate = won / finished episodes. A `failed` episode (the policy could not be run: an API error
-- past its retries, a crashed worker) is not a loss of the policy; every view shows it in `failed`.
-- Before this migration episode_summary and policy_evaluation divided by all episodes and teacher_costs by
-- finished ones; this replaces 027's policy_evaluation (and 029's, in warehouses that applied it).
CREATE OR REPLACE MACRO metric_success_rate(won, finished) AS round(won / nullif(finished, 0), 3);

CREATE OR REPLACE VIEW episode_summary AS
SELECT
    teacher,
    mode,
    split,
    task_type,
    count(*)                                          AS episodes,
    count(*) FILTER (WHERE status = 'failed')         AS failed,
    count(*) FILTER (WHERE won)                       AS won,
    metric_success_rate(count(*) FILTER (WHERE won), count(*) FILTER (WHERE status = 'finished'))
                                                      AS success_rate,
    round(avg(n_steps), 1)                            AS mean_steps,
    round(avg(n_harness_calls), 2)                    AS mean_harness_calls,
    round(avg(n_invalid), 2)                          AS mean_invalid,
    any_value(policy_kind)                            AS policy_kind
FROM episodes
GROUP BY teacher, mode, split, task_type;

CREATE OR REPLACE VIEW teacher_costs AS
WITH per AS (
    SELECT
        teacher,
        mode,
        any_value(policy_kind)                      AS policy_kind,
        count(*)                                    AS episodes,
        count(*) FILTER (WHERE status = 'finished') AS finished,
        count(*) FILTER (WHERE status = 'failed')   AS failed,
        count(*) FILTER (WHERE won)                 AS won,
        avg(n_steps)                                AS mean_steps,
        avg(n_harness_calls)                        AS mean_harness_calls
    FROM episodes
    GROUP BY teacher, mode
),
spent AS (
    SELECT
        teacher,
        mode,
        count(*)           AS attempts,
        sum(input_tokens)  AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cost_usd)      AS cost_usd
    FROM episode_attempts
    GROUP BY teacher, mode
)
SELECT
    per.teacher,
    per.mode,
    t.provider,
    t.model,
    per.episodes,
    spent.attempts,
    per.finished,
    per.failed,
    per.won,
    metric_success_rate(per.won, per.finished)                             AS success_rate,
    round(per.mean_steps, 1)                                               AS mean_steps,
    round(per.mean_harness_calls, 2)                                       AS mean_harness_calls,
    spent.input_tokens,
    spent.output_tokens,
    round(spent.cost_usd, 6)                                               AS cost_usd,
    round((spent.input_tokens + spent.output_tokens) / nullif(per.won, 0), 1) AS tokens_per_success,
    round(spent.cost_usd / nullif(per.won, 0), 6)                          AS cost_per_success,
    per.policy_kind
FROM per
LEFT JOIN spent USING (teacher, mode)
LEFT JOIN teachers t ON t.name = per.teacher;

-- Every policy on the evaluation splits, per step budget, split and task type (overall: 'ALL').
-- policy_kind says which rows are teachers and which are students (trained model versions).
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
    count(*) FILTER (WHERE e.status = 'finished')   AS finished
FROM episodes e
LEFT JOIN model_versions m ON m.model_version = e.model_version
WHERE e.split IN ('valid_seen', 'valid_unseen')
GROUP BY e.teacher, e.mode, e.max_steps, e.split, ROLLUP (e.task_type);
