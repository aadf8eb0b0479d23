-- Progress audit per teacher and consolidator: subgoals closed by a commit and the share true in the engine.
-- progress_validity counts the won episodes, the ones a success-filtered dataset can hold: a teacher's false claims
-- in games it lost are its play, not the consolidator's error (docs/audit.md, Progress validity).
-- progress_validity_all counts every episode; curation drops any single episode below CurationConfig.min_progress_validity either way.
CREATE OR REPLACE VIEW audit_progress AS
SELECT
    ce.teacher,
    pc.consolidator,
    count(*)                                            AS subgoals_closed,
    count(*) FILTER (WHERE pc.holds)                    AS subgoals_true,
    count(*) FILTER (WHERE pc.form = 'unrecognized')    AS unrecognized,
    round(count(*) FILTER (WHERE pc.holds AND ce.won) / nullif(count(*) FILTER (WHERE ce.won), 0), 4)
                                                        AS progress_validity,
    round(count(*) FILTER (WHERE pc.holds) / nullif(count(*), 0), 4) AS progress_validity_all
FROM progress_checks pc
JOIN consolidated_episodes ce USING (episode_id, consolidator)
WHERE ce.status = 'ok'
GROUP BY ALL;
