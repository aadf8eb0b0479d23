-- The examples of the episodes in the registered relation `_chosen` (episode_id, dataset_split) for one
-- $consolidator, as training rows: the conversation, lineage ids and a token estimate (UTF-8 bytes / 4,
-- rounded up, per text), ordered by episode and turn.
SELECT ex.episode_id, ex.turn, ex.kind, ce.game_id, ce.task_type, ce.teacher, ce.consolidator, ex.bank_version,
       ex.consolidation_run_id, c.dataset_split, ex.turn_vars::VARCHAR AS turn_vars,
       [{'role': 'system', 'content': ex.system_prompt}, {'role': 'user', 'content': ex.user_prompt},
        {'role': 'assistant', 'content': ex.target}] AS messages,
       ceil(octet_length(encode(ex.system_prompt)) / 4) + ceil(octet_length(encode(ex.user_prompt)) / 4)
           + ceil(octet_length(encode(ex.target)) / 4) AS estimated_tokens
FROM bpe_examples ex
JOIN _chosen c USING (episode_id)
JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE ex.consolidator = $consolidator
ORDER BY ex.episode_id, ex.turn;
