-- Remove a model version's row ($model_version), before it is stored again.
DELETE FROM model_versions WHERE model_version = $model_version;
