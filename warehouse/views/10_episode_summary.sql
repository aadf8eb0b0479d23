-- Episodes per teacher, mode, split and task type; success_rate is metric_success_rate (won / finished).
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
