-- Datasets with no dataset_examples row (curated before lineage ids existed), oldest first.
SELECT dataset_id
FROM datasets d
WHERE NOT EXISTS (SELECT 1 FROM dataset_examples de WHERE de.dataset_id = d.dataset_id)
ORDER BY created_at;
