-- Cost accounting per teacher and mode. Outcomes (success, steps, harness calls) describe the episodes as
-- stored now; spend (tokens, cost) sums every attempt (episode_attempts), so failed attempts that a rerun
-- replaced still count, and cost_per_success charges all of it to the successful episodes.
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
