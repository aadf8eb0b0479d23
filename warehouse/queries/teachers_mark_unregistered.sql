-- Mark teachers ($names) as no longer in the registry; their rows stay for the episodes that name them.
UPDATE teachers SET in_registry = false WHERE list_contains($names, name);
