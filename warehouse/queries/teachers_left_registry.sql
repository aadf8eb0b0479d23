-- Teachers still marked in the registry whose names are not in it any more ($names: the registry's names).
SELECT name FROM teachers WHERE in_registry AND NOT list_contains($names, name) ORDER BY name;
