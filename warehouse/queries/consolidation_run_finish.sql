-- Close a consolidation run ($consolidation_run_id) with its counts, spend, end time and the bank version it
-- produced (NULL: none).
UPDATE consolidation_runs
SET n_consolidated = $n_consolidated, n_failed = $n_failed, input_tokens = $input_tokens,
    output_tokens = $output_tokens, cost_usd = $cost_usd, finished_at = $finished_at,
    new_bank_version = $new_bank_version
WHERE consolidation_run_id = $consolidation_run_id;
