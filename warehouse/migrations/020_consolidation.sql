-- Consolidation: BPE-annotated training examples, their audit rows, and the Experience bank as data.
-- Every row carries lineage: consolidation run id, consolidator, bank version, code version.

CREATE TABLE IF NOT EXISTS consolidation_runs (
    consolidation_run_id VARCHAR PRIMARY KEY,
    teacher         VARCHAR NOT NULL,
    consolidator    VARCHAR NOT NULL,     -- rule | llm
    model           VARCHAR,              -- the LLM consolidator's model; NULL for rule
    prompt_id       VARCHAR,              -- the consolidation prompt set (LLM); NULL for rule
    prompt_sha      VARCHAR,
    engine          VARCHAR NOT NULL,     -- engine the episodes were replayed on
    bank_id         VARCHAR NOT NULL,     -- the frozen bank the examples recall from
    bank_version    INTEGER NOT NULL,
    new_bank_version INTEGER,             -- the version this run proposed (NULL: no bank change)
    n_episodes      INTEGER,
    n_consolidated  INTEGER,
    n_failed        INTEGER,
    input_tokens    BIGINT,
    output_tokens   BIGINT,
    cost_usd        DOUBLE,
    started_at      TIMESTAMP NOT NULL,
    finished_at     TIMESTAMP,
    code_version    VARCHAR NOT NULL,
    run_id          VARCHAR NOT NULL
);

-- One row per (source episode, consolidator): ok or failed, with the replay and LLM accounting.
CREATE TABLE IF NOT EXISTS consolidated_episodes (
    episode_id      VARCHAR NOT NULL,
    consolidator    VARCHAR NOT NULL,
    consolidation_run_id VARCHAR NOT NULL,
    teacher         VARCHAR NOT NULL,
    source_mode     VARCHAR NOT NULL,     -- bpe | react: the log the examples were made from
    game_id         VARCHAR NOT NULL,
    split           VARCHAR NOT NULL,
    task_type       VARCHAR NOT NULL,
    won             BOOLEAN NOT NULL,
    status          VARCHAR NOT NULL,     -- ok | failed
    failure_reason  VARCHAR,
    attempts        INTEGER NOT NULL,     -- consolidator calls (LLM retries included)
    n_source_turns  INTEGER NOT NULL,
    n_env_steps     INTEGER NOT NULL,
    n_examples      INTEGER NOT NULL,
    n_meta          INTEGER NOT NULL,
    action_sig      VARCHAR,              -- sha256 of the env-command sequence (exact-duplicate key)
    input_tokens    BIGINT,
    output_tokens   BIGINT,
    cost_usd        DOUBLE,
    bank_id         VARCHAR NOT NULL,
    bank_version    INTEGER NOT NULL,
    engine          VARCHAR NOT NULL,
    created_at      TIMESTAMP NOT NULL,
    code_version    VARCHAR NOT NULL,
    PRIMARY KEY (episode_id, consolidator)
);

-- One training example per agent turn: the prompt the student sees and the target turn.
CREATE TABLE IF NOT EXISTS bpe_examples (
    episode_id      VARCHAR NOT NULL,
    consolidator    VARCHAR NOT NULL,
    turn            INTEGER NOT NULL,     -- 0-based turn of the consolidated episode
    source_t        INTEGER,              -- the source step this env turn came from; NULL for inserted meta-actions
    env_step        INTEGER NOT NULL,     -- env commands applied before this turn
    kind            VARCHAR NOT NULL,     -- env | track | commit | recall | note (intended kind)
    action          VARCHAR NOT NULL,
    argument        VARCHAR,
    system_prompt   VARCHAR NOT NULL,
    user_prompt     VARCHAR NOT NULL,
    target          VARCHAR NOT NULL,     -- <think>…</think><action>…</action>
    result          VARCHAR NOT NULL,     -- what the turn returned (env text or harness result)
    parse_ok        BOOLEAN NOT NULL,     -- the target parses to the intended kind and action
    parse_error     VARCHAR,
    admissible      BOOLEAN,              -- env turns: the command was admissible
    belief_json     JSON NOT NULL,        -- Belief snapshot shown in the prompt
    progress_json   JSON NOT NULL,        -- Progress snapshot shown in the prompt
    experience_json JSON NOT NULL,        -- entries recalled by this turn (recall turns) else []
    facts_json      JSON NOT NULL,        -- engine ground truth at the same step
    prompt_id       VARCHAR NOT NULL,
    prompt_sha      VARCHAR NOT NULL,
    bank_id         VARCHAR NOT NULL,
    bank_version    INTEGER NOT NULL,
    consolidation_run_id VARCHAR NOT NULL,
    PRIMARY KEY (episode_id, consolidator, turn)
);

-- Belief audit: one row per belief claim (precision) and per observable engine fact (recall).
CREATE TABLE IF NOT EXISTS belief_checks (
    episode_id      VARCHAR NOT NULL,
    consolidator    VARCHAR NOT NULL,
    turn            INTEGER NOT NULL,
    check_kind      VARCHAR NOT NULL,     -- claim | observable
    aspect          VARCHAR NOT NULL,     -- located | holding | opened | closed | flag
    subject         VARCHAR NOT NULL,     -- the object or receptacle
    believed        VARCHAR,              -- what Belief says (NULL: nothing)
    actual          VARCHAR,              -- what the engine says (NULL: nothing)
    ok              BOOLEAN NOT NULL
);

-- Progress audit: one row per subgoal closed by a commit, checked against the engine at that turn.
CREATE TABLE IF NOT EXISTS progress_checks (
    episode_id      VARCHAR NOT NULL,
    consolidator    VARCHAR NOT NULL,
    turn            INTEGER NOT NULL,     -- the commit turn
    subgoal         VARCHAR NOT NULL,
    form            VARCHAR NOT NULL,     -- take | heat | cool | clean | light | put | unrecognized
    holds           BOOLEAN NOT NULL,     -- verifiably true in the engine state (unrecognized: false)
    detail          VARCHAR NOT NULL
);

-- The Experience bank as versioned data.
CREATE TABLE IF NOT EXISTS experience_banks (
    bank_id         VARCHAR NOT NULL,
    version         INTEGER NOT NULL,
    parent_version  INTEGER,              -- NULL for the seed
    frozen          BOOLEAN NOT NULL,     -- frozen versions never change; runs record the one they used
    n_entries       INTEGER NOT NULL,
    entries_json    JSON NOT NULL,        -- the whole bank (ExperienceBankData)
    sha256          VARCHAR NOT NULL,
    source_episodes JSON NOT NULL,        -- episode ids the version was induced from
    consolidation_run_id VARCHAR,         -- NULL for the seed
    created_at      TIMESTAMP NOT NULL,
    code_version    VARCHAR NOT NULL,
    PRIMARY KEY (bank_id, version)
);

CREATE TABLE IF NOT EXISTS experience_bank_entries (
    bank_id         VARCHAR NOT NULL,
    version         INTEGER NOT NULL,
    entry_id        VARCHAR NOT NULL,
    category        VARCHAR NOT NULL,
    key             VARCHAR NOT NULL,
    text            VARCHAR NOT NULL,
    usage           INTEGER NOT NULL,
    PRIMARY KEY (bank_id, version, entry_id)
);

CREATE TABLE IF NOT EXISTS experience_edits (
    bank_id         VARCHAR NOT NULL,
    version         INTEGER NOT NULL,     -- the version the edit produced
    edit_index      INTEGER NOT NULL,
    op              VARCHAR NOT NULL,     -- ADD | UPDATE | REMOVE | SKIP
    category        VARCHAR NOT NULL,
    entry_id        VARCHAR,              -- NULL for a SKIP that matched no entry
    text            VARCHAR,
    old_text        VARCHAR,
    reason          VARCHAR NOT NULL,
    evidence        INTEGER,              -- episodes supporting the edit
    consolidator    VARCHAR NOT NULL,
    consolidation_run_id VARCHAR NOT NULL,
    created_at      TIMESTAMP NOT NULL,
    PRIMARY KEY (bank_id, version, edit_index)
);
