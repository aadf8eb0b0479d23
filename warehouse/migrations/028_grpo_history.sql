-- GRPO versions: per logged optimizer step, the mean of every reward term and the episode statistics
-- (success, turns, harness calls, invalid turns, repeats) of the rollouts that step trained on.
ALTER TABLE model_versions ADD COLUMN IF NOT EXISTS rollout_history JSON;
