-- The dataset a model version ($model_version) was trained on.
SELECT dataset_id FROM model_versions WHERE model_version = $model_version;
