-- A teacher's ($teacher) curated dataset ids, newest first.
SELECT dataset_id FROM datasets WHERE teacher = $teacher ORDER BY created_at DESC, version DESC;
