-- The Experience bank version a teacher's episodes recall from (NULL: the seed bank).
ALTER TABLE teachers ADD COLUMN IF NOT EXISTS bank_version INTEGER;
