-- Whether a bank version is stored ($bank_id, $version): 1 or 0.
SELECT count(*) FROM experience_banks WHERE bank_id = $bank_id AND version = $version;
