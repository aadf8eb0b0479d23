-- Summary views over episodes, for people and for the CLI.

CREATE OR REPLACE VIEW episode_summary AS
SELECT
    teacher,
    mode,
    split,
    task_type,
    count(*)                                    AS episodes,
    count(*) FILTER (WHERE status = 'failed')   AS failed,
    sum(won::INTEGER)                           AS won,
    round(avg(won::INTEGER), 3)                 AS success_rate,
    round(avg(n_steps), 1)                      AS mean_steps,
    round(avg(n_harness_calls), 2)              AS mean_harness_calls,
    round(avg(n_invalid), 2)                    AS mean_invalid
FROM episodes
GROUP BY ALL;

CREATE OR REPLACE VIEW step_kind_counts AS
SELECT e.teacher, e.mode, s.kind, count(*) AS steps
FROM steps s JOIN episodes e USING (episode_id)
GROUP BY ALL;
