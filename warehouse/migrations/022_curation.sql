-- Curated SFT datasets: one row per dataset version, the games it holds, and the leak check view.

CREATE TABLE IF NOT EXISTS datasets (
    dataset_id      VARCHAR PRIMARY KEY,  -- '<name>@v<version>'
    name            VARCHAR NOT NULL,
    version         INTEGER NOT NULL,
    content_sha     VARCHAR NOT NULL,     -- sha256 of the selected (episode, turn) keys and the config
    path            VARCHAR NOT NULL,     -- datasets.save_to_disk folder
    teacher         VARCHAR NOT NULL,
    consolidator    VARCHAR NOT NULL,
    n_train         INTEGER NOT NULL,
    n_validation    INTEGER NOT NULL,
    n_episodes      INTEGER NOT NULL,
    n_games         INTEGER NOT NULL,
    composition     JSON NOT NULL,        -- examples and episodes by task type, teacher, kind and split
    dropped         JSON NOT NULL,        -- episodes/examples removed, by reason
    bank_id         VARCHAR NOT NULL,
    bank_version    INTEGER NOT NULL,     -- the frozen bank training and evaluation runs should use
    example_bank_versions JSON NOT NULL,  -- bank versions the examples' recalls were rendered with
    source_episodes JSON NOT NULL,        -- lineage: episode ids
    consolidation_runs JSON NOT NULL,     -- lineage: consolidation run ids
    config          JSON NOT NULL,
    created_at      TIMESTAMP NOT NULL,
    code_version    VARCHAR NOT NULL,
    run_id          VARCHAR NOT NULL,
    UNIQUE (name, version)
);

CREATE TABLE IF NOT EXISTS dataset_games (
    dataset_id      VARCHAR NOT NULL,
    game_id         VARCHAR NOT NULL,
    dataset_split   VARCHAR NOT NULL,     -- train | validation (a split of train-split games, by game)
    examples        INTEGER NOT NULL,
    PRIMARY KEY (dataset_id, game_id)
);

-- Views are not migrations: this migration's view statements (curation_leaks, curation_summary) are defined
-- in warehouse/views/ (warehouse/view_files.py).
