-- Which episodes made this evaluation? ($evaluation_episode_id: an evaluation episode of a student; every
-- evaluation row of policy_evaluation is made of such episodes, all of one model version.) One row per source
-- episode, with the teacher, its model, the prompt sha, the Experience bank, the consolidator and the code
-- versions and run ids on the way from the episode to the model version that played the evaluation.
SELECT DISTINCT
    ev.model_version, l.stage, l.parent_version, l.dataset_id, l.dataset_bank_version,
    l.episode_id, l.teacher, l.teacher_provider, l.teacher_model, l.prompt_id, l.prompt_sha, l.episode_bank,
    l.consolidator, l.consolidation_run_id, l.consolidator_model, l.consolidator_prompt_sha,
    l.episode_code_version, l.episode_run_id, l.model_code_version, l.model_run_id
FROM episodes ev
JOIN lineage l ON l.model_version = ev.model_version
WHERE ev.episode_id = $evaluation_episode_id AND ev.policy_kind = 'student'
ORDER BY l.episode_id;
