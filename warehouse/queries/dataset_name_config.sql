-- The name, curation config and Experience bank version of a dataset ($dataset_id).
SELECT name, config, bank_version FROM datasets WHERE dataset_id = $dataset_id;
