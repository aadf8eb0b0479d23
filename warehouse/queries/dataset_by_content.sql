-- A stored dataset of a name with the same content ($name, $content_sha), to reuse instead of curating again.
SELECT dataset_id, path, n_train, n_validation, composition, dropped, bank_version
FROM datasets
WHERE name = $name AND content_sha = $content_sha;
