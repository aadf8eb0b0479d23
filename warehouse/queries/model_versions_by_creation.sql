-- Every model version id with the recipe overrides it trained with (JSON list; NULL before recipes), oldest first.
SELECT model_version, recipe_overrides FROM model_versions ORDER BY created_at, model_version;
