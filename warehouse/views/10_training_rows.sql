-- One training row per consolidated example: the conversation (system, user, assistant), lineage ids, source mode
-- and a token estimate (UTF-8 bytes / 4, rounded up, per text). Curation (the chosen episodes' rows) and derived
-- datasets (a dataset's rows, by dataset_examples) both read it, so a training row is defined once.
CREATE OR REPLACE VIEW training_rows AS
SELECT ex.episode_id, ex.turn, ex.kind, ce.game_id, ce.task_type, ce.teacher, ce.consolidator, ce.source_mode,
       ex.bank_version, ex.consolidation_run_id, ex.turn_vars::VARCHAR AS turn_vars,
       [{'role': 'system', 'content': ex.system_prompt}, {'role': 'user', 'content': ex.user_prompt},
        {'role': 'assistant', 'content': ex.target}] AS messages,
       ceil(octet_length(encode(ex.system_prompt)) / 4) + ceil(octet_length(encode(ex.user_prompt)) / 4)
           + ceil(octet_length(encode(ex.target)) / 4) AS estimated_tokens
FROM bpe_examples ex
JOIN consolidated_episodes ce USING (episode_id, consolidator);
