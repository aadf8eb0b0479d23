-- Finished episodes per teacher and split: what consolidation can read (it names what exists when asked
-- for a teacher or split without episodes).
SELECT teacher, split, count(*) AS episodes
FROM episodes
WHERE status = 'finished'
GROUP BY teacher, split
ORDER BY teacher, split;
