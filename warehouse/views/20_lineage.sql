-- Lineage, walked by id (docs/audit.md, "Lineage"): one row per model version and source episode it was
-- trained from (GRPO versions carry their SFT parent's dataset), with every id and version on the way:
-- model version → dataset → examples → consolidation run → source episode → teacher.
CREATE OR REPLACE VIEW lineage AS
SELECT
    m.model_version,
    m.stage,
    m.parent_version,
    m.base_model,
    m.code_version         AS model_code_version,
    m.run_id               AS model_run_id,
    d.dataset_id,
    d.bank_id              AS dataset_bank_id,
    d.bank_version         AS dataset_bank_version,
    d.code_version         AS dataset_code_version,
    d.run_id               AS dataset_run_id,
    de.consolidator,
    de.consolidation_run_id,
    cr.model               AS consolidator_model,
    cr.prompt_sha          AS consolidator_prompt_sha,
    cr.bank_version        AS consolidation_bank_version,
    cr.new_bank_version    AS consolidation_new_bank_version,
    cr.code_version        AS consolidation_code_version,
    cr.run_id              AS consolidation_parent_run_id,
    de.examples,
    e.episode_id,
    e.teacher,
    t.provider             AS teacher_provider,
    t.model                AS teacher_model,
    e.mode,
    e.game_id,
    e.split,
    e.seed,
    e.won,
    e.prompt_id,
    e.prompt_sha,
    e.bank                 AS episode_bank,
    e.engine,
    e.code_version         AS episode_code_version,
    e.run_id               AS episode_run_id
FROM model_versions m
JOIN datasets d ON d.dataset_id = m.dataset_id
JOIN dataset_episodes de ON de.dataset_id = d.dataset_id
LEFT JOIN consolidation_runs cr ON cr.consolidation_run_id = de.consolidation_run_id
JOIN episodes e ON e.episode_id = de.episode_id
LEFT JOIN teachers t ON t.name = e.teacher;
