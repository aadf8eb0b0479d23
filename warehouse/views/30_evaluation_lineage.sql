-- One row per evaluation episode of a student and source episode of that student's training data.
CREATE OR REPLACE VIEW evaluation_lineage AS
SELECT
    ev.episode_id          AS evaluation_episode_id,
    ev.split               AS evaluation_split,
    ev.game_id             AS evaluation_game_id,
    ev.max_steps           AS evaluation_max_steps,
    ev.won                 AS evaluation_won,
    ev.bank                AS evaluation_bank,
    ev.code_version        AS evaluation_code_version,
    ev.run_id              AS evaluation_run_id,
    l.*
FROM episodes ev
JOIN lineage l ON l.model_version = ev.model_version
WHERE ev.policy_kind = 'student';
