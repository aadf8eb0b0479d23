-- How often a student ($model_version) already played the expert's turn in the states it reached, by task type
-- (the rows of its relabelling episodes; ALL: every task type).
SELECT coalesce(task_type, 'ALL') AS task_type, count(DISTINCT episode_id) AS episodes, count(*) AS labelled_turns,
       round(avg(agreed::INT), 3) AS agreed_with_expert
FROM expert_labels
WHERE model_version = $model_version
GROUP BY ROLLUP (task_type)
ORDER BY task_type = 'ALL', task_type;
