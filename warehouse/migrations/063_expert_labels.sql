-- On-policy relabelling (DAgger): a student plays, the expert labels every state it reaches.
-- * steps.label: the turn the expert would have played in that state (NULL on every other episode);
--   steps.turn_vars: the prompt's template variables at that turn, so the label can be re-rendered in any
--   prompt set (set only where label is).
-- * episodes.policy_kind 'relabel': played by a student (model_version names it) with expert labels; kept
--   apart from 'student' so that evaluation views never count these train-split episodes.
-- * expert_labels: the labelled turns, one row each, as the relabelled dataset reads them.
ALTER TABLE steps ADD COLUMN IF NOT EXISTS label VARCHAR;
ALTER TABLE steps ADD COLUMN IF NOT EXISTS turn_vars JSON;

CREATE OR REPLACE VIEW expert_labels AS
SELECT e.episode_id, e.model_version, e.teacher AS policy, e.game_id, e.split, e.task_type, e.seed,
       e.won, e.run_id, s.t AS turn, s.kind AS student_kind, s.action AS student_action, s.label, s.turn_vars,
       regexp_extract(s.raw_output, '<action>(.*)</action>', 1) = regexp_extract(s.label, '<action>(.*)</action>', 1)
           AS agreed  -- the student's action was the expert's
FROM episodes e
JOIN steps s USING (episode_id)
WHERE e.policy_kind = 'relabel' AND e.status = 'finished' AND s.label IS NOT NULL;
