-- Explicit lineage ids, and students as policies of their own kind.
-- * episodes.policy_kind: 'teacher' (a registry entry) or 'student' (a trained model version);
--   episodes.model_version: the model version an evaluation episode played (NULL for teachers).
-- * Students are not teachers: rows that evaluation wrote into `teachers` for model versions are removed
--   (the `policies` view shows both kinds, saying which is which).
-- * teachers.in_registry: the table is derived from the registry file (the truth); a row whose entry left the
--   registry is kept for the episodes that name it, marked false.
-- * dataset_examples: the exact examples (episode, consolidator, turn) a dataset holds, with the
--   consolidation run that made each, so a dataset names its inputs by id.
ALTER TABLE episodes ADD COLUMN IF NOT EXISTS policy_kind VARCHAR DEFAULT 'teacher';
ALTER TABLE episodes ADD COLUMN IF NOT EXISTS model_version VARCHAR;
UPDATE episodes SET policy_kind = 'student', model_version = teacher
WHERE teacher IN (SELECT model_version FROM model_versions);
UPDATE episodes SET policy_kind = 'teacher' WHERE policy_kind IS NULL;

-- (ALTER before DELETE: DuckDB refuses to commit a transaction that deletes rows of a table and then alters it)
ALTER TABLE teachers ADD COLUMN IF NOT EXISTS in_registry BOOLEAN DEFAULT true;
DELETE FROM teachers WHERE name IN (SELECT model_version FROM model_versions);

CREATE TABLE IF NOT EXISTS dataset_examples (
    dataset_id           VARCHAR NOT NULL,
    episode_id           VARCHAR NOT NULL,
    consolidator         VARCHAR NOT NULL,
    turn                 INTEGER NOT NULL,
    dataset_split        VARCHAR NOT NULL,  -- train | validation
    consolidation_run_id VARCHAR NOT NULL,  -- the run that made this example
    PRIMARY KEY (dataset_id, episode_id, consolidator, turn)
);
