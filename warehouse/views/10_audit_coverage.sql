-- Coverage per teacher and consolidator: source episodes consolidated, examples, the meta-action share and
-- the share of episodes with both a commit and a recall. A metric with nothing to measure is NULL, never 0.
CREATE OR REPLACE VIEW audit_coverage AS
WITH examples AS (
    SELECT episode_id, consolidator,
           count(*) FILTER (WHERE kind = 'commit') AS commits,
           count(*) FILTER (WHERE kind = 'recall') AS recalls,
           count(*) FILTER (WHERE kind = 'note')   AS notes,
           count(*) FILTER (WHERE kind = 'track')  AS tracks,
           count(*)                                AS turns
    FROM bpe_examples GROUP BY ALL
)
SELECT
    ce.teacher,
    ce.consolidator,
    count(*)                                             AS episodes,
    count(*) FILTER (WHERE ce.status = 'ok')             AS consolidated,
    count(*) FILTER (WHERE ce.status = 'failed')         AS failed,
    round(count(*) FILTER (WHERE ce.status = 'ok') / nullif(count(*), 0), 4) AS episode_coverage,
    sum(ex.turns)                                        AS examples,
    sum(ex.commits) AS commits, sum(ex.recalls) AS recalls, sum(ex.notes) AS notes, sum(ex.tracks) AS tracks,
    round((sum(ex.commits) + sum(ex.recalls) + sum(ex.notes) + sum(ex.tracks)) / nullif(sum(ex.turns), 0), 4)
                                                         AS meta_share,
    round(count(*) FILTER (WHERE ex.commits > 0 AND ex.recalls > 0)
          / nullif(count(*) FILTER (WHERE ce.status = 'ok'), 0), 4) AS episodes_with_commit_and_recall
FROM consolidated_episodes ce
LEFT JOIN examples ex USING (episode_id, consolidator)
GROUP BY ALL;
