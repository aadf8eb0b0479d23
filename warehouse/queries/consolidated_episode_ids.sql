-- Episodes of a teacher ($teacher) that a consolidator ($consolidator) consolidated successfully.
SELECT episode_id
FROM consolidated_episodes
WHERE teacher = $teacher AND consolidator = $consolidator AND status = 'ok';
