-- The examples of some episodes ($episode_ids, $consolidator), in turn order.
SELECT ex.episode_id, ex.turn, ex.kind, ex.system_prompt, ex.user_prompt, ex.target, ex.bank_id, ex.bank_version,
       ex.turn_vars,
       ce.game_id, ce.task_type, ce.teacher, ce.consolidator, ex.consolidation_run_id
FROM bpe_examples ex
JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE ex.consolidator = $consolidator AND list_contains($episode_ids, ex.episode_id)
ORDER BY ex.episode_id, ex.turn;
