-- Per task type and overall, for one teacher, mode and split ($teacher, $mode, $split).
SELECT
    coalesce(task_type, 'ALL')                 AS task_type,
    count(*)                                   AS episodes,
    count(*) FILTER (WHERE status = 'failed')  AS failed,
    sum(won::INTEGER)                          AS won,
    round(avg(won::INTEGER), 3)                AS success_rate,
    round(avg(n_steps), 1)                     AS mean_steps,
    round(avg(n_harness_calls), 2)             AS mean_harness_calls
FROM episodes
WHERE teacher = $teacher AND mode = $mode AND split = $split
GROUP BY ROLLUP (task_type)
ORDER BY task_type = 'ALL', task_type;
