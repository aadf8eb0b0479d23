-- Belief audit per teacher and consolidator (docs/audit.md): precision of Belief's claims and recall of the
-- observable engine facts. A metric with nothing to measure is NULL, never 0.
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
