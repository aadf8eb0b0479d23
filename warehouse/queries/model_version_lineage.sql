-- Where a model version ($model_version) came from: teacher, stage, dataset and parent version.
SELECT teacher, stage, dataset_id, parent_version FROM model_versions WHERE model_version = $model_version;
