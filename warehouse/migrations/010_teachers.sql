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

-- One row per teacher and mode. success_rate counts finished episodes; cost_per_success charges the
-- cost of every stored episode (lost and failed ones too) to the successful ones.
CREATE OR REPLACE VIEW teacher_costs AS
WITH per AS (
    SELECT
        teacher,
        mode,
        count(*)                                   AS episodes,
        count(*) FILTER (WHERE status = 'finished') AS finished,
        count(*) FILTER (WHERE status = 'failed')   AS failed,
        count(*) FILTER (WHERE won)                 AS won,
        avg(n_steps)                                AS mean_steps,
        avg(n_harness_calls)                        AS mean_harness_calls,
        sum(input_tokens)                           AS input_tokens,
        sum(output_tokens)                          AS output_tokens,
        sum(cost_usd)                               AS cost_usd
    FROM episodes
    GROUP BY teacher, mode
)
SELECT
    per.teacher,
    per.mode,
    t.provider,
    t.model,
    per.episodes,
    per.finished,
    per.failed,
    per.won,
    round(per.won / nullif(per.finished, 0), 3)                        AS success_rate,
    round(per.mean_steps, 1)                                           AS mean_steps,
    round(per.mean_harness_calls, 2)                                   AS mean_harness_calls,
    per.input_tokens,
    per.output_tokens,
    round(per.cost_usd, 6)                                             AS cost_usd,
    round((per.input_tokens + per.output_tokens) / nullif(per.won, 0), 1) AS tokens_per_success,
    round(per.cost_usd / nullif(per.won, 0), 6)                        AS cost_per_success
FROM per
LEFT JOIN teachers t ON t.name = per.teacher;
