-- The episode_summary view, every row, in a stable order.
SELECT * FROM episode_summary ORDER BY ALL;
