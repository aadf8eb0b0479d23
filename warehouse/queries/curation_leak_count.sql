-- Evaluation-split games in a dataset ($dataset_id): must be 0 (view curation_leaks).
SELECT count(*) FROM curation_leaks WHERE dataset_id = $dataset_id;
