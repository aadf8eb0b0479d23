-- The teacher and saved folder of a dataset ($dataset_id).
SELECT teacher, path FROM datasets WHERE dataset_id = $dataset_id;
