-- Every stored attempt of an episode, kept when a failed episode is replaced by its rerun, so that the
-- tokens and dollars a failed attempt spent are never lost from cost accounting. One row per
-- (episode_id, attempt); attempt 1 is the first write. Existing episodes are backfilled as attempt 1.
CREATE TABLE IF NOT EXISTS episode_attempts (
    episode_id      VARCHAR NOT NULL,
    attempt         INTEGER NOT NULL,
    teacher         VARCHAR NOT NULL,
    mode            VARCHAR NOT NULL,
    status          VARCHAR NOT NULL,  -- finished | failed
    failure_reason  VARCHAR,
    won             BOOLEAN NOT NULL,
    n_steps         INTEGER NOT NULL,
    input_tokens    BIGINT,
    output_tokens   BIGINT,
    cost_usd        DOUBLE,
    started_at      TIMESTAMP,
    finished_at     TIMESTAMP,
    run_id          VARCHAR NOT NULL,
    PRIMARY KEY (episode_id, attempt)
);

INSERT INTO episode_attempts
SELECT episode_id, 1, teacher, mode, status, failure_reason, won, n_steps, input_tokens, output_tokens,
       cost_usd, started_at, finished_at, run_id
FROM episodes
WHERE episode_id NOT IN (SELECT episode_id FROM episode_attempts);

-- Distillation budget of a registered teacher: train games its distillation run collects on.
ALTER TABLE teachers ADD COLUMN IF NOT EXISTS distill_games INTEGER;

-- Views are not migrations: this migration's view statements (teacher_costs) are defined in warehouse/views/
-- (warehouse/view_files.py).
