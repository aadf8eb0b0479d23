-- Every recipe that realized a model version: the one that trained it, and each later recipe file (or overrides)
-- whose settings named the same version and reused it. A recipe file whose sections a change left as they were
-- (a comment, another section) keeps its versions: students.py finds them here by the file's new sha256.
CREATE TABLE IF NOT EXISTS model_version_recipes (
    model_version    VARCHAR NOT NULL,
    recipe           VARCHAR NOT NULL,
    recipe_sha256    VARCHAR NOT NULL,
    recipe_overrides VARCHAR NOT NULL,  -- JSON list of section.field=value, '[]' for none
    claimed_at       TIMESTAMP NOT NULL,
    PRIMARY KEY (model_version, recipe_sha256, recipe_overrides)
);
INSERT INTO model_version_recipes
SELECT model_version, recipe, recipe_sha256, coalesce(CAST(recipe_overrides AS VARCHAR), '[]'), created_at
FROM model_versions
WHERE recipe IS NOT NULL AND recipe_sha256 IS NOT NULL
ON CONFLICT DO NOTHING;
