-- The examples a dataset holds ($dataset_id), as training rows in the shape `curation_examples_chosen` gives:
-- the conversation, lineage ids, source mode, split and a token estimate (UTF-8 bytes / 4, rounded up, per text).
SELECT ex.episode_id, ex.turn, ex.kind, ce.game_id, ce.task_type, ce.teacher, ce.consolidator, ce.source_mode, ex.bank_version,
       ex.consolidation_run_id, de.dataset_split, ex.turn_vars::VARCHAR AS turn_vars,
       [{'role': 'system', 'content': ex.system_prompt}, {'role': 'user', 'content': ex.user_prompt},
        {'role': 'assistant', 'content': ex.target}] AS messages,
       ceil(octet_length(encode(ex.system_prompt)) / 4) + ceil(octet_length(encode(ex.user_prompt)) / 4)
           + ceil(octet_length(encode(ex.target)) / 4) AS estimated_tokens
FROM dataset_examples de
JOIN bpe_examples ex USING (episode_id, consolidator, turn)
JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE de.dataset_id = $dataset_id
ORDER BY ex.episode_id, ex.turn;
