-- The model versions a recipe file realized ($recipe, $recipe_sha256: trained, or named again and reused) from one
-- teacher's data ($teacher), with the overrides of that realization, oldest first.
SELECT v.model_version, v.stage, v.parent_version, v.settings, r.recipe, r.recipe_sha256,
       r.recipe_overrides, v.code_version, v.seconds, v.rollout_history
FROM model_version_recipes r
JOIN model_versions v USING (model_version)
WHERE r.recipe = $recipe AND r.recipe_sha256 = $recipe_sha256 AND v.teacher = $teacher
ORDER BY v.created_at, r.claimed_at;
