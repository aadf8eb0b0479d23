-- The entries of a frozen bank version ($bank_id, $version; NULL version: the latest frozen one).
SELECT entries_json
FROM experience_banks
WHERE bank_id = $bank_id AND frozen AND ($version IS NULL OR version = $version)
ORDER BY version DESC
LIMIT 1;
