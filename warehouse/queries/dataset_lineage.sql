-- The lineage of a dataset ($dataset_id): its consolidation runs, source episode count, code version and run.
SELECT consolidation_runs, n_episodes, code_version, run_id FROM datasets WHERE dataset_id = $dataset_id;
