-- Trained students: one row per model version, with the dataset, base model and settings it came from.
CREATE TABLE IF NOT EXISTS model_versions (
    model_version       VARCHAR PRIMARY KEY,  -- '<teacher>-sft-<sha12>': same dataset + settings, same version
    stage               VARCHAR NOT NULL,     -- sft | grpo
    teacher             VARCHAR NOT NULL,
    dataset_id          VARCHAR NOT NULL,     -- lineage: datasets.dataset_id
    parent_version      VARCHAR,              -- grpo: the SFT version it started from
    base_model          VARCHAR NOT NULL,     -- hub id, local folder, or 'tiny' (built locally)
    path                VARCHAR NOT NULL,     -- saved model + tokenizer (LoRA merged)
    settings            JSON NOT NULL,
    train_examples      INTEGER NOT NULL,
    validation_examples INTEGER NOT NULL,
    steps               INTEGER NOT NULL,
    train_loss          DOUBLE,
    eval_loss           DOUBLE,
    parameters          BIGINT NOT NULL,
    seconds             DOUBLE NOT NULL,
    loss_history        JSON NOT NULL,        -- [[step, loss], ...]
    eval_history        JSON NOT NULL,        -- [[step, eval_loss], ...]
    created_at          TIMESTAMP NOT NULL,
    code_version        VARCHAR NOT NULL,
    run_id              VARCHAR NOT NULL
);
