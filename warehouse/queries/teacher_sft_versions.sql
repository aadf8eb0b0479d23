-- A teacher's ($teacher) SFT model versions, newest first.
SELECT model_version FROM model_versions WHERE teacher = $teacher AND stage = 'sft' ORDER BY created_at DESC;
