-- Steps per teacher, mode and kind.
CREATE OR REPLACE VIEW step_kind_counts AS
SELECT e.teacher, e.mode, s.kind, count(*) AS steps
FROM steps s JOIN episodes e USING (episode_id)
GROUP BY ALL;
