-- On-policy relabelling (DAgger): the labelled turns of relabelling episodes (policy_kind 'relabel': a student
-- played, the expert labelled every state it reached), one row each, as the relabelled dataset reads them.
CREATE OR REPLACE VIEW expert_labels AS
SELECT e.episode_id, e.model_version, e.teacher AS policy, e.game_id, e.split, e.task_type, e.seed,
       e.won, e.run_id, s.t AS turn, s.kind AS student_kind, s.action AS student_action, s.label, s.turn_vars,
       regexp_extract(s.raw_output, '<action>(.*)</action>', 1) = regexp_extract(s.label, '<action>(.*)</action>', 1)
           AS agreed  -- the student's action was the expert's
FROM episodes e
JOIN steps s USING (episode_id)
WHERE e.policy_kind = 'relabel' AND e.status = 'finished' AND s.label IS NOT NULL;
