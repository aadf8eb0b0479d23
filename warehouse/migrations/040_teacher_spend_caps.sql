-- Automation that cannot run away: a teacher's spend cap over its attempt ledger (USD, NULL: no cap) and
-- whether the sensor may start its distillation run by itself (opt-in).
ALTER TABLE teachers ADD COLUMN IF NOT EXISTS max_spend_usd DOUBLE;
ALTER TABLE teachers ADD COLUMN IF NOT EXISTS auto_distill BOOLEAN DEFAULT false;
