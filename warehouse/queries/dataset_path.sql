-- The saved folder of a dataset ($dataset_id).
SELECT path FROM datasets WHERE dataset_id = $dataset_id;
