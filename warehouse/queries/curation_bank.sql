-- The Experience bank a dataset records ($runs: the consolidation runs of its examples): the newest frozen
-- version those runs produced or started from. Never a version another teacher's later run produced.
SELECT b.bank_id, max(b.version) AS version
FROM experience_banks b
WHERE b.frozen
  AND (list_contains($runs, b.consolidation_run_id)
       OR EXISTS (SELECT 1 FROM consolidation_runs r
                  WHERE list_contains($runs, r.consolidation_run_id)
                    AND r.bank_id = b.bank_id AND r.bank_version = b.version))
GROUP BY b.bank_id
ORDER BY version DESC
LIMIT 1;
