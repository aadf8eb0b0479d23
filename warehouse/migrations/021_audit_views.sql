-- Audit views over consolidation, per teacher and per consolidator. Documented in docs/audit.md.
-- A metric with nothing to measure is NULL, never 0.

CREATE OR REPLACE VIEW audit_belief AS
SELECT
    ce.teacher,
    bc.consolidator,
    count(*) FILTER (WHERE bc.check_kind = 'claim')                        AS claims,
    count(*) FILTER (WHERE bc.check_kind = 'claim' AND bc.ok)              AS claims_correct,
    count(*) FILTER (WHERE bc.check_kind = 'observable')                   AS observables,
    count(*) FILTER (WHERE bc.check_kind = 'observable' AND bc.ok)         AS observables_recalled,
    round(count(*) FILTER (WHERE bc.check_kind = 'claim' AND bc.ok)
          / nullif(count(*) FILTER (WHERE bc.check_kind = 'claim'), 0), 4)      AS belief_precision,
    round(count(*) FILTER (WHERE bc.check_kind = 'observable' AND bc.ok)
          / nullif(count(*) FILTER (WHERE bc.check_kind = 'observable'), 0), 4) AS belief_recall
FROM belief_checks bc
JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE ce.status = 'ok'
GROUP BY ALL;

CREATE OR REPLACE VIEW audit_belief_by_aspect AS
SELECT
    ce.teacher, bc.consolidator, bc.check_kind, bc.aspect,
    count(*) AS checks,
    round(avg(bc.ok::INTEGER), 4) AS rate
FROM belief_checks bc
JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE ce.status = 'ok'
GROUP BY ALL;

CREATE OR REPLACE VIEW audit_progress AS
SELECT
    ce.teacher,
    pc.consolidator,
    count(*)                                            AS subgoals_closed,
    count(*) FILTER (WHERE pc.holds)                    AS subgoals_true,
    count(*) FILTER (WHERE pc.form = 'unrecognized')    AS unrecognized,
    round(count(*) FILTER (WHERE pc.holds) / nullif(count(*), 0), 4) AS progress_validity
FROM progress_checks pc
JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE ce.status = 'ok'
GROUP BY ALL;

CREATE OR REPLACE VIEW audit_parse AS
SELECT
    ce.teacher,
    ex.consolidator,
    count(*)                                            AS examples,
    count(*) FILTER (WHERE ex.kind <> 'env')            AS meta_examples,
    count(*) FILTER (WHERE ex.parse_ok)                 AS parse_ok,
    count(*) FILTER (WHERE NOT ex.parse_ok AND ex.kind <> 'env') AS meta_parse_errors,
    round(count(*) FILTER (WHERE ex.parse_ok) / nullif(count(*), 0), 4)  AS parse_validity,
    round(count(*) FILTER (WHERE ex.parse_ok AND ex.kind <> 'env')
          / nullif(count(*) FILTER (WHERE ex.kind <> 'env'), 0), 4)      AS meta_parse_validity
FROM bpe_examples ex
JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE ce.status = 'ok'
GROUP BY ALL;

CREATE OR REPLACE VIEW audit_coverage AS
WITH examples AS (
    SELECT episode_id, consolidator,
           count(*) FILTER (WHERE kind = 'commit') AS commits,
           count(*) FILTER (WHERE kind = 'recall') AS recalls,
           count(*) FILTER (WHERE kind = 'note')   AS notes,
           count(*) FILTER (WHERE kind = 'track')  AS tracks,
           count(*)                                AS turns
    FROM bpe_examples GROUP BY ALL
)
SELECT
    ce.teacher,
    ce.consolidator,
    count(*)                                             AS episodes,
    count(*) FILTER (WHERE ce.status = 'ok')             AS consolidated,
    count(*) FILTER (WHERE ce.status = 'failed')         AS failed,
    round(count(*) FILTER (WHERE ce.status = 'ok') / nullif(count(*), 0), 4) AS episode_coverage,
    sum(ex.turns)                                        AS examples,
    sum(ex.commits) AS commits, sum(ex.recalls) AS recalls, sum(ex.notes) AS notes, sum(ex.tracks) AS tracks,
    round((sum(ex.commits) + sum(ex.recalls) + sum(ex.notes) + sum(ex.tracks)) / nullif(sum(ex.turns), 0), 4)
                                                         AS meta_share,
    round(count(*) FILTER (WHERE ex.commits > 0 AND ex.recalls > 0)
          / nullif(count(*) FILTER (WHERE ce.status = 'ok'), 0), 4) AS episodes_with_commit_and_recall
FROM consolidated_episodes ce
LEFT JOIN examples ex USING (episode_id, consolidator)
GROUP BY ALL;

-- Source episodes of each teacher that no consolidator has touched yet.
CREATE OR REPLACE VIEW audit_unconsolidated AS
SELECT e.teacher, e.mode, e.split, count(*) AS episodes
FROM episodes e
WHERE e.status = 'finished'
  AND NOT EXISTS (SELECT 1 FROM consolidated_episodes ce WHERE ce.episode_id = e.episode_id)
GROUP BY ALL;

CREATE OR REPLACE VIEW audit_cost AS
SELECT teacher, consolidator,
       sum(attempts)       AS calls,
       sum(input_tokens)   AS input_tokens,
       sum(output_tokens)  AS output_tokens,
       sum(cost_usd)       AS cost_usd
FROM consolidated_episodes
GROUP BY ALL;

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

-- The headline: one row per teacher and consolidator, the numbers the blocking checks gate on.
CREATE OR REPLACE VIEW audit_quality AS
SELECT
    c.teacher, c.consolidator,
    c.episodes, c.consolidated, c.episode_coverage,
    p.examples, b.belief_precision, b.belief_recall,
    g.progress_validity, p.parse_validity, c.meta_share
FROM audit_coverage c
LEFT JOIN audit_belief b USING (teacher, consolidator)
LEFT JOIN audit_progress g USING (teacher, consolidator)
LEFT JOIN audit_parse p USING (teacher, consolidator);
