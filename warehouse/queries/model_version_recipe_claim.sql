-- A recipe realized a model version (trained it, or named it again and reused it); idempotent.
INSERT INTO model_version_recipes (model_version, recipe, recipe_sha256, recipe_overrides, claimed_at)
VALUES ($model_version, $recipe, $recipe_sha256, $recipe_overrides, $claimed_at)
ON CONFLICT DO NOTHING;
