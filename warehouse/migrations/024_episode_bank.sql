-- Lineage: the frozen Experience bank version a bpe episode recalled from ('alfworld-seed@v0'); NULL in react.
ALTER TABLE episodes ADD COLUMN IF NOT EXISTS bank VARCHAR;
