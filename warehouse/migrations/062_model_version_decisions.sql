-- Model versions record the prompt set the student plays with, the input tokens it was trained on (compute,
-- for equal-compute comparisons) and its decision metrics on held-out turns at every evaluation.
ALTER TABLE model_versions ADD COLUMN IF NOT EXISTS prompt_set VARCHAR;
ALTER TABLE model_versions ADD COLUMN IF NOT EXISTS tokens_seen BIGINT;
ALTER TABLE model_versions ADD COLUMN IF NOT EXISTS decision_history JSON;
