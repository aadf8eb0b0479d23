-- The recipe that trained a model version: its name, the sha256 of its file and the overrides applied
-- (section.field=value). NULL for versions trained before recipes existed.
ALTER TABLE model_versions ADD COLUMN IF NOT EXISTS recipe VARCHAR;
ALTER TABLE model_versions ADD COLUMN IF NOT EXISTS recipe_sha256 VARCHAR;
ALTER TABLE model_versions ADD COLUMN IF NOT EXISTS recipe_overrides JSON;
