-- The source episodes of each dataset, with the consolidation run that made their examples.
CREATE OR REPLACE VIEW dataset_episodes AS
SELECT dataset_id, episode_id, consolidator, consolidation_run_id, count(*) AS examples
FROM dataset_examples
GROUP BY ALL;
