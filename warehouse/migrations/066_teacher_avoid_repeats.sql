-- Constrained decoding that also leaves out environment commands already issued at the same observation.
ALTER TABLE teachers ADD COLUMN IF NOT EXISTS avoid_repeats BOOLEAN DEFAULT false;
