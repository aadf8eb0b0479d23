-- Each teacher's students (its model versions), played as themselves (greedy, the default decoding: the policy
-- named as the version) per mode and step budget, with their success on dev and the held-out splits, and the one to
-- use: the version with the highest success on the whole dev split, where choices are made (held-out play never
-- chooses). A version is ranked once it has played every dev game the warehouse holds; a tie goes to the earlier
-- version (an SFT student before its GRPO child). dev_rank 1 is the teacher's student to use.
CREATE OR REPLACE VIEW teacher_students AS
WITH dev_games AS (
    SELECT count(*) AS n FROM games WHERE split = 'dev'
), played AS (
    SELECT m.teacher, m.model_version, m.stage, m.parent_version, m.created_at, p.mode, p.max_steps,
           any_value(p.episodes) FILTER (WHERE p.split = 'dev')                AS dev_episodes,
           any_value(p.success_rate) FILTER (WHERE p.split = 'dev')            AS dev_success,
           any_value(p.success_rate) FILTER (WHERE p.split = 'valid_seen')     AS valid_seen_success,
           any_value(p.success_rate) FILTER (WHERE p.split = 'valid_unseen')   AS valid_unseen_success
    FROM model_versions m
    JOIN policy_evaluation p ON p.policy = m.model_version AND p.task_type = 'ALL'
    GROUP BY ALL
), ranked AS (
    SELECT played.*, dev_episodes = (SELECT n FROM dev_games) AND dev_success IS NOT NULL AS dev_complete
    FROM played
)
SELECT teacher, model_version, stage, parent_version, mode, max_steps, dev_episodes, dev_success,
       valid_seen_success, valid_unseen_success,
       CASE WHEN dev_complete THEN row_number() OVER (PARTITION BY teacher, mode, max_steps, dev_complete
                                                      ORDER BY dev_success DESC, created_at) END AS dev_rank
FROM ranked;
