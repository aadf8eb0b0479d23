-- The steps of some episodes ($episode_ids), in turn order.
SELECT episode_id, t, kind, action, argument, coalesce(think, '') AS think, observation, admissible, done
FROM steps
WHERE list_contains($episode_ids, episode_id)
ORDER BY episode_id, t;
