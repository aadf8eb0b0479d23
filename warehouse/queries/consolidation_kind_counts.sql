-- Examples by kind for one teacher and consolidator ($teacher, $consolidator).
SELECT ex.kind, count(*) AS examples
FROM bpe_examples ex JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE ce.teacher = $teacher AND ex.consolidator = $consolidator AND ce.status = 'ok'
GROUP BY ALL ORDER BY ex.kind;
