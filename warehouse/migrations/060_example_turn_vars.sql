-- Every example keeps the variables its prompt was rendered from (objective, observation, admissible commands,
-- recent actions, Belief/Progress/Experience views), so a student's own prompt set can re-render any stored turn.
-- NULL for examples consolidated before this migration: reconsolidate them to train with another prompt set.
ALTER TABLE bpe_examples ADD COLUMN IF NOT EXISTS turn_vars JSON;
