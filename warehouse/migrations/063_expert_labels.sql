-- On-policy relabelling (DAgger): a student plays, the expert labels every state it reaches.
-- * steps.label: the turn the expert would have played in that state (NULL on every other episode);
--   steps.turn_vars: the prompt's template variables at that turn, so the label can be re-rendered in any
--   prompt set (set only where label is).
-- * episodes.policy_kind 'relabel': played by a student (model_version names it) with expert labels; kept
--   apart from 'student' so that evaluation views never count these train-split episodes.
-- * expert_labels: the labelled turns, one row each, as the relabelled dataset reads them.
ALTER TABLE steps ADD COLUMN IF NOT EXISTS label VARCHAR;
ALTER TABLE steps ADD COLUMN IF NOT EXISTS turn_vars JSON;

-- Views are not migrations: this migration's view statements (expert_labels) are defined in warehouse/views/
-- (warehouse/view_files.py).
