-- Lineage rows of a dataset ($dataset_id) from the examples its saved folder holds (registered relation `_held`:
-- episode_id, consolidator, turn, dataset_split), with the consolidation run whose row holds each example now.
-- DuckDB answers an INSERT with the number of rows it wrote.
INSERT INTO dataset_examples BY NAME
SELECT $dataset_id AS dataset_id, h.episode_id, h.consolidator, h.turn, h.dataset_split, ex.consolidation_run_id
FROM _held h
JOIN bpe_examples ex USING (episode_id, consolidator, turn);
