-- Game counts per split and task type.
SELECT split, task_type, count(*) AS games FROM games GROUP BY ALL ORDER BY split, task_type;
