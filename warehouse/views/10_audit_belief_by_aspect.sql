-- The belief checks per teacher, consolidator, check kind and aspect, with the share that held.
CREATE OR REPLACE VIEW audit_belief_by_aspect AS
SELECT
    ce.teacher, bc.consolidator, bc.check_kind, bc.aspect,
    count(*) AS checks,
    round(avg(bc.ok::INTEGER), 4) AS rate
FROM belief_checks bc
JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE ce.status = 'ok'
GROUP BY ALL;
