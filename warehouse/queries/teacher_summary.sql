-- Per task type and overall, for one teacher, mode and split ($teacher, $mode, $split).
SELECT
    coalesce(task_type, 'ALL')                 AS task_type,
    count(*)                                   AS episodes,
    count(*) FILTER (WHERE status = 'failed')  AS failed,
    count(*) FILTER (WHERE won)                AS won,
    metric_success_rate(count(*) FILTER (WHERE won), count(*) FILTER (WHERE status = 'finished'))
                                               AS success_rate,
    round(avg(n_steps), 1)                     AS mean_steps,
    round(avg(n_harness_calls), 2)             AS mean_harness_calls
FROM episodes
WHERE teacher = $teacher AND mode = $mode AND split = $split
GROUP BY ROLLUP (task_type)
ORDER BY task_type = 'ALL', task_type;
