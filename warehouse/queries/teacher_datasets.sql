-- A teacher's ($teacher) curated dataset ids, newest first: its own episodes' datasets, not the relabelled ones a
-- DAgger round adds on top (config.relabelled_by set), which `evoharness dagger` trains on by name.
SELECT dataset_id FROM datasets
WHERE teacher = $teacher AND json_extract_string(CAST(config AS JSON), '$.relabelled_by') IS NULL
ORDER BY created_at DESC, version DESC;
