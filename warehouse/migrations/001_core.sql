-- Core tables: games, episodes, steps. Applied once, in order, by warehouse.migrate().
-- Every row carries lineage: run id, code version and the prompt template sha256.

CREATE TABLE IF NOT EXISTS games (
    game_id      VARCHAR PRIMARY KEY,   -- stable: '<split>/<task folder>/<trial>'
    split        VARCHAR NOT NULL,      -- train | valid_seen | valid_unseen
    task_type    VARCHAR NOT NULL,      -- one of the six ALFWorld task types
    task_folder  VARCHAR NOT NULL,
    trial        VARCHAR NOT NULL,
    game_path    VARCHAR NOT NULL,      -- relative to ALFWORLD_DATA, never absolute
    objective    VARCHAR,
    walkthrough_len INTEGER,
    file_sha256  VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS episodes (
    episode_id      VARCHAR PRIMARY KEY,  -- sha256 of (teacher, game_id, seed, prompt_sha, mode, max_steps)
    teacher         VARCHAR NOT NULL,
    mode            VARCHAR NOT NULL,     -- bpe | react
    game_id         VARCHAR NOT NULL,
    split           VARCHAR NOT NULL,
    task_type       VARCHAR NOT NULL,
    seed            BIGINT NOT NULL,
    max_steps       INTEGER NOT NULL,
    status          VARCHAR NOT NULL,     -- finished | failed
    failure_reason  VARCHAR,
    won             BOOLEAN NOT NULL,
    n_steps         INTEGER NOT NULL,
    n_env_steps     INTEGER NOT NULL,
    n_harness_calls INTEGER NOT NULL,
    n_invalid       INTEGER NOT NULL,
    final_score     DOUBLE,
    input_tokens    BIGINT,
    output_tokens   BIGINT,
    cost_usd        DOUBLE,               -- NULL where the policy has no price (the offline expert)
    started_at      TIMESTAMP NOT NULL,
    finished_at     TIMESTAMP NOT NULL,
    prompt_id       VARCHAR NOT NULL,
    prompt_sha      VARCHAR NOT NULL,
    engine          VARCHAR NOT NULL,
    code_version    VARCHAR NOT NULL,
    run_id          VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS steps (
    episode_id      VARCHAR NOT NULL,
    t               INTEGER NOT NULL,     -- 0-based turn index
    kind            VARCHAR NOT NULL,     -- env | track | commit | recall | note | invalid
    action          VARCHAR NOT NULL,     -- normalised action text as parsed
    argument        VARCHAR,              -- meta-action argument
    think           VARCHAR,
    raw_output      VARCHAR NOT NULL,     -- the policy's text, verbatim
    parse_error     VARCHAR,
    observation     VARCHAR NOT NULL,     -- what the agent saw after this turn (env text or harness result)
    admissible      BOOLEAN,              -- env steps: was the command admissible
    won             BOOLEAN NOT NULL,
    done            BOOLEAN NOT NULL,
    score           DOUBLE,
    prompt          VARCHAR NOT NULL,     -- the rendered prompt the policy saw at this turn
    prompt_id       VARCHAR NOT NULL,
    prompt_sha      VARCHAR NOT NULL,
    latency_ms      DOUBLE NOT NULL,
    input_tokens    INTEGER,
    output_tokens   INTEGER,
    cost_usd        DOUBLE,
    PRIMARY KEY (episode_id, t)
);

-- Views are not migrations: this migration's view statements (harness_calls) are defined in warehouse/views/
-- (warehouse/view_files.py).
