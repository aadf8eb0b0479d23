-- A policy's overall greedy play on one split at one step budget ($policy, $split, $max_steps).
SELECT finished, success_rate, mean_steps, mean_harness_calls, mean_repeats_lost
FROM policy_evaluation
WHERE policy = $policy AND split = $split AND max_steps = $max_steps AND task_type = 'ALL';
