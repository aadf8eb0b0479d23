-- The version number a new dataset of a name ($name) takes: one more than the highest stored (1 for the first).
SELECT coalesce(max(version), 0) + 1 FROM datasets WHERE name = $name;
