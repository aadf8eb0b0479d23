-- Consolidated episodes of one teacher and consolidator with per-episode quality ($teacher, $consolidator).
WITH belief AS (
    SELECT episode_id,
           avg(ok::INTEGER) FILTER (WHERE check_kind = 'claim')      AS belief_precision,
           avg(ok::INTEGER) FILTER (WHERE check_kind = 'observable') AS belief_recall
    FROM belief_checks WHERE consolidator = $consolidator GROUP BY ALL
), progress AS (
    SELECT episode_id, avg(holds::INTEGER) AS progress_validity
    FROM progress_checks WHERE consolidator = $consolidator GROUP BY ALL
), parse AS (
    SELECT episode_id, avg(parse_ok::INTEGER) AS parse_validity,
           list(action ORDER BY turn) FILTER (WHERE kind = 'env') AS commands
    FROM bpe_examples WHERE consolidator = $consolidator GROUP BY ALL
)
SELECT ce.episode_id, ce.game_id, g.split AS catalog_split, ce.split, ce.task_type, ce.teacher, ce.won,
       ce.source_mode, ce.action_sig, ce.n_examples, ce.consolidation_run_id,
       b.belief_precision, b.belief_recall, p.progress_validity, x.parse_validity, x.commands,
       sha256(ce.episode_id) AS stable_key
FROM consolidated_episodes ce
LEFT JOIN games g USING (game_id)
LEFT JOIN belief b USING (episode_id)
LEFT JOIN progress p USING (episode_id)
LEFT JOIN parse x USING (episode_id)
WHERE ce.teacher = $teacher AND ce.consolidator = $consolidator AND ce.status = 'ok'
ORDER BY ce.game_id, ce.source_mode, ce.episode_id;
