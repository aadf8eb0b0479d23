-- The student whose expert-labelled turns a relabelled dataset ($dataset_id) adds (NULL: not relabelled).
SELECT config->>'relabelled_by' FROM datasets WHERE dataset_id = $dataset_id;
