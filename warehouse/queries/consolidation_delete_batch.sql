-- Remove one consolidator's ($consolidator) rows of the episodes in the registered relation `_batch_ids`
-- (episode_id) from every consolidation table: one semi-join per table for the whole batch.
DELETE FROM bpe_examples
WHERE consolidator = $consolidator AND episode_id IN (SELECT episode_id FROM _batch_ids);
DELETE FROM belief_checks
WHERE consolidator = $consolidator AND episode_id IN (SELECT episode_id FROM _batch_ids);
DELETE FROM progress_checks
WHERE consolidator = $consolidator AND episode_id IN (SELECT episode_id FROM _batch_ids);
DELETE FROM consolidated_episodes
WHERE consolidator = $consolidator AND episode_id IN (SELECT episode_id FROM _batch_ids);
