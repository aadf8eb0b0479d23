-- The teacher registry mirrored from teachers.yaml (key variable names only, never keys), and per-teacher
-- cost accounting over episodes.

CREATE TABLE IF NOT EXISTS teachers (
    name             VARCHAR PRIMARY KEY,  -- registry name = Dagster partition key = episodes.teacher
    provider         VARCHAR NOT NULL,     -- anthropic | openai | openai_compatible | local_hf | expert
    model            VARCHAR,
    base_url         VARCHAR,
    api_key_env      VARCHAR,              -- the NAME of the env var holding the key
    price_in         DOUBLE,               -- USD per million input tokens
    price_out        DOUBLE,               -- USD per million output tokens
    max_concurrency  INTEGER NOT NULL,
    temperature      DOUBLE,
    max_tokens       INTEGER NOT NULL,
    mode             VARCHAR NOT NULL,     -- default interface: bpe | react
    prompt_template  VARCHAR NOT NULL,
    retry            VARCHAR NOT NULL,     -- RetryConfig as JSON
    spec_sha256      VARCHAR NOT NULL,
    updated_at       TIMESTAMP NOT NULL
);

-- Views are not migrations: this migration's view statements (teacher_costs) are defined in warehouse/views/
-- (warehouse/view_files.py).
