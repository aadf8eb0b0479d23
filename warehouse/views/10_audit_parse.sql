-- Parse audit per teacher and consolidator: examples whose target parses to the intended kind and action.
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
