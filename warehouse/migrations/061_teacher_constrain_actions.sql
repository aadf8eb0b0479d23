-- Local students decode their actions constrained to the admissible commands and meta-actions.
ALTER TABLE teachers ADD COLUMN IF NOT EXISTS constrain_actions BOOLEAN DEFAULT false;
