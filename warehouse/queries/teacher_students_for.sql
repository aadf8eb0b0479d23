-- The students of one teacher ($teacher; NULL: every teacher), the one to use first (view teacher_students).
SELECT teacher, model_version, stage, parent_version, mode, max_steps, dev_episodes, dev_success, valid_seen_success,
       valid_unseen_success, dev_rank
FROM teacher_students
WHERE $teacher IS NULL OR teacher = $teacher
ORDER BY teacher, mode, max_steps, dev_rank NULLS LAST, model_version;
