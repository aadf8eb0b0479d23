-- The meta-action turns (track, commit, recall, note) of every episode, with what the harness returned.
CREATE OR REPLACE VIEW harness_calls AS
SELECT episode_id, t, kind, argument, observation AS result
FROM steps
WHERE kind IN ('track', 'commit', 'recall', 'note');
