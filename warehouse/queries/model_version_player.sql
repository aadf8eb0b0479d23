-- What evaluating a model version ($model_version) needs: its saved folder and the Experience bank version
-- of its training dataset.
SELECT m.path, d.bank_version
FROM model_versions m
JOIN datasets d USING (dataset_id)
WHERE m.model_version = $model_version;
