-- The lineage rows of a new dataset, from the registered relation `_lineage` (dataset_examples columns).
INSERT INTO dataset_examples BY NAME SELECT * FROM _lineage;
