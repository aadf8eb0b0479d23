-- Every model version id with the recipe overrides of its lineage, oldest first: its own and every ancestor's
-- (JSON list; '[]' for none), so a version trained from a screened parent counts as a variant of its recipe
-- although its own stage set nothing.
WITH RECURSIVE lineage AS (
    SELECT model_version, model_version AS ancestor, parent_version FROM model_versions
    UNION ALL
    SELECT l.model_version, p.model_version, p.parent_version
    FROM lineage l JOIN model_versions p ON p.model_version = l.parent_version
)
SELECT v.model_version,
       to_json(coalesce(list(o.value ORDER BY l.ancestor, o.value) FILTER (WHERE o.value IS NOT NULL),
                        []::VARCHAR[])) AS recipe_overrides
FROM model_versions v
JOIN lineage l ON l.model_version = v.model_version
JOIN model_versions a ON a.model_version = l.ancestor
LEFT JOIN LATERAL (SELECT unnest(CAST(coalesce(a.recipe_overrides, '[]') AS VARCHAR[])) AS value) o ON true
GROUP BY v.model_version, v.created_at
ORDER BY v.created_at, v.model_version;
