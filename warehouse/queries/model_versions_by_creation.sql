-- Every model version id, oldest first.
SELECT model_version FROM model_versions ORDER BY created_at, model_version;
