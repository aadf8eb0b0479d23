-- Teachers (registry entries) and students (model versions) side by side; policy_kind says which is which.
CREATE OR REPLACE VIEW policies AS
SELECT name AS policy, 'teacher' AS policy_kind, provider, model, NULL::VARCHAR AS distilled_from,
       NULL::VARCHAR AS stage, NULL::VARCHAR AS dataset_id, NULL::VARCHAR AS parent_version, in_registry
FROM teachers
UNION ALL
SELECT model_version, 'student', 'local_hf', path, teacher, stage, dataset_id, parent_version, NULL
FROM model_versions;
