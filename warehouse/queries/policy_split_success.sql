-- A policy's finished episodes and success rate on one split at one step budget ($policy, $split, $max_steps).
SELECT finished, success_rate
FROM policy_evaluation
WHERE policy = $policy AND split = $split AND max_steps = $max_steps AND task_type = 'ALL';
