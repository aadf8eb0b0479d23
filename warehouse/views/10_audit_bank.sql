-- Bank size, growth and churn per version (churn: ADD+UPDATE+REMOVE over the parent's size).
CREATE OR REPLACE VIEW audit_bank AS
WITH edits AS (
    SELECT bank_id, version,
           count(*) FILTER (WHERE op = 'ADD')    AS adds,
           count(*) FILTER (WHERE op = 'UPDATE') AS updates,
           count(*) FILTER (WHERE op = 'REMOVE') AS removes,
           count(*) FILTER (WHERE op = 'SKIP')   AS skips
    FROM experience_edits GROUP BY ALL
), sizes AS (
    SELECT bank_id, version, category, count(*) AS entries, sum(usage) AS usage
    FROM experience_bank_entries GROUP BY ALL
)
SELECT
    b.bank_id, b.version, b.parent_version, b.frozen, b.n_entries,
    b.n_entries - p.n_entries                      AS growth,
    coalesce(e.adds, 0) AS adds, coalesce(e.updates, 0) AS updates,
    coalesce(e.removes, 0) AS removes, coalesce(e.skips, 0) AS skips,
    round((coalesce(e.adds, 0) + coalesce(e.updates, 0) + coalesce(e.removes, 0)) / nullif(p.n_entries, 0), 4)
                                                   AS churn,
    json_array_length(b.source_episodes)           AS source_episodes,
    (SELECT string_agg(s.category || ' ' || s.entries, ', ' ORDER BY s.category)
     FROM sizes s WHERE s.bank_id = b.bank_id AND s.version = b.version) AS by_category,
    b.created_at
FROM experience_banks b
LEFT JOIN experience_banks p ON p.bank_id = b.bank_id AND p.version = b.parent_version
LEFT JOIN edits e ON e.bank_id = b.bank_id AND e.version = b.version;
