-- What a consolidation run ($consolidation_run_id) used and produced: consolidator model and prompt, the bank
-- version it started from and the one it proposed, its code version.
SELECT model, prompt_sha, bank_id, bank_version, new_bank_version, code_version
FROM consolidation_runs
WHERE consolidation_run_id = $consolidation_run_id;
