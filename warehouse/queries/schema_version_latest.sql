-- The highest migration version applied.
SELECT max(version) FROM schema_version;
