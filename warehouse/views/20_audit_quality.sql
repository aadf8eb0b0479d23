-- The headline audit: one row per teacher and consolidator, the numbers the blocking checks gate on.
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
