-- The Experience bank (id, version) a dataset ($dataset_id) records.
SELECT bank_id, bank_version FROM datasets WHERE dataset_id = $dataset_id;
