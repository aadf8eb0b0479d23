-- Source episodes of each teacher that no consolidator has touched yet.
CREATE OR REPLACE VIEW audit_unconsolidated AS
SELECT e.teacher, e.mode, e.split, count(*) AS episodes
FROM episodes e
WHERE e.status = 'finished'
  AND NOT EXISTS (SELECT 1 FROM consolidated_episodes ce WHERE ce.episode_id = e.episode_id)
GROUP BY ALL;
