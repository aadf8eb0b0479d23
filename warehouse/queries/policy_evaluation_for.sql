-- One policy's evaluation rows ($policy, $mode, $max_steps), with the same rows of the teacher its model version
-- ($model_version: the policy's own name, or the version a decoding variant such as '<version>.no-repeat' or
-- '<version>.unconstrained' plays) was distilled from (when it is a student and that teacher was evaluated on the split with the same budget;
-- compare the episodes column too).
SELECT policy, split, task_type, episodes, failed, won, success_rate, mean_steps, mean_harness_calls, mean_invalid,
       mean_repeats, mean_repeats_lost
FROM policy_evaluation
WHERE mode = $mode AND max_steps = $max_steps
  AND (policy = $policy
       OR policy = (SELECT teacher FROM model_versions WHERE model_version = $model_version))
ORDER BY split, task_type = 'ALL', task_type, is_student DESC;
