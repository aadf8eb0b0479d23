-- Dollars a teacher has spent over every stored attempt (failed attempts included), from the ledger.
SELECT coalesce(sum(cost_usd), 0) AS spent_usd FROM episode_attempts WHERE teacher = $teacher;
