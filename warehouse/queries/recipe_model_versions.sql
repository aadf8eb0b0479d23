-- The model versions a recipe file trained ($recipe, $recipe_sha256) from one teacher's data ($teacher), oldest first.
SELECT model_version, stage, parent_version, settings, recipe, recipe_sha256, recipe_overrides, code_version, seconds,
       rollout_history
FROM model_versions
WHERE recipe = $recipe AND recipe_sha256 = $recipe_sha256 AND teacher = $teacher
ORDER BY created_at;
