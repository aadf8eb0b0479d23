-- A teacher's newest model version of a stage ($teacher, $stage: sft | grpo).
SELECT model_version FROM model_versions WHERE teacher = $teacher AND stage = $stage ORDER BY created_at DESC LIMIT 1;
