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

-- Cost accounting per teacher and mode. Outcomes (success, steps, harness calls) describe the episodes as
-- stored now; spend (tokens, cost) sums every attempt, so failed attempts that a rerun replaced still
-- count, and cost_per_success charges all of it to the successful episodes.
CREATE OR REPLACE VIEW teacher_costs AS
WITH per AS (
    SELECT
        teacher,
        mode,
        count(*)                                    AS episodes,
        count(*) FILTER (WHERE status = 'finished') AS finished,
        count(*) FILTER (WHERE status = 'failed')   AS failed,
        count(*) FILTER (WHERE won)                 AS won,
        avg(n_steps)                                AS mean_steps,
        avg(n_harness_calls)                        AS mean_harness_calls
    FROM episodes
    GROUP BY teacher, mode
),
spent AS (
    SELECT
        teacher,
        mode,
        count(*)           AS attempts,
        sum(input_tokens)  AS input_tokens,
        sum(output_tokens) AS output_tokens,
        sum(cost_usd)      AS cost_usd
    FROM episode_attempts
    GROUP BY teacher, mode
)
SELECT
    per.teacher,
    per.mode,
    t.provider,
    t.model,
    per.episodes,
    spent.attempts,
    per.finished,
    per.failed,
    per.won,
    round(per.won / nullif(per.finished, 0), 3)                            AS success_rate,
    round(per.mean_steps, 1)                                               AS mean_steps,
    round(per.mean_harness_calls, 2)                                       AS mean_harness_calls,
    spent.input_tokens,
    spent.output_tokens,
    round(spent.cost_usd, 6)                                               AS cost_usd,
    round((spent.input_tokens + spent.output_tokens) / nullif(per.won, 0), 1) AS tokens_per_success,
    round(spent.cost_usd / nullif(per.won, 0), 6)                          AS cost_per_success
FROM per
LEFT JOIN spent USING (teacher, mode)
LEFT JOIN teachers t ON t.name = per.teacher;
