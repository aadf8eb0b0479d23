-- Every column of a stored model version ($model_version).
SELECT * FROM model_versions WHERE model_version = $model_version;
