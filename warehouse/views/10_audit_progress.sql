-- Progress audit per teacher and consolidator: subgoals closed by a commit and the share true in the engine.
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
