-- Views are defined once, in warehouse/views/, and applied after the migrations on every writable open
-- (warehouse/view_files.py). One row per file as last applied: an open whose files match writes nothing, and
-- a view or macro whose file is gone is dropped.
CREATE TABLE IF NOT EXISTS view_files (
    name        VARCHAR PRIMARY KEY,  -- the view or macro the file defines
    kind        VARCHAR NOT NULL,     -- VIEW | MACRO
    file        VARCHAR NOT NULL,     -- its file name under warehouse/views/
    sha256      VARCHAR NOT NULL,     -- of the file's text as applied
    applied_at  TIMESTAMP NOT NULL
);
