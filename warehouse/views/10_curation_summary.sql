-- One row per curated dataset: its sizes, its Experience bank and its examples by task type.
CREATE OR REPLACE VIEW curation_summary AS
SELECT dataset_id, teacher, consolidator, n_train, n_validation, n_episodes, n_games, bank_id, bank_version,
       composition->'task_type' AS by_task_type, created_at
FROM datasets;
