-- Episodes already induced into some version of a bank ($bank_id).
SELECT DISTINCT unnest(CAST(source_episodes AS VARCHAR[])) AS episode_id
FROM experience_banks
WHERE bank_id = $bank_id;
