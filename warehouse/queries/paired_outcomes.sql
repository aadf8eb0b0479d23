-- Two policies game by game ($policy against $baseline at one step budget, $max_steps), per split: the games both
-- played to the end, and of those the games both won, only one won, neither won. A game counts as won by a policy
-- when one of its finished episodes there won. The discordant games (only one won) are what an exact McNemar test
-- counts.
WITH outcome AS (
    SELECT teacher AS policy, split, game_id, bool_or(won) AS won
    FROM episodes
    WHERE teacher IN ($policy, $baseline) AND max_steps = $max_steps AND status = 'finished'
    GROUP BY ALL
)
SELECT p.split,
       count(*) AS games,
       count(*) FILTER (WHERE p.won AND b.won) AS both_won,
       count(*) FILTER (WHERE p.won AND NOT b.won) AS only_policy,
       count(*) FILTER (WHERE b.won AND NOT p.won) AS only_baseline,
       count(*) FILTER (WHERE NOT p.won AND NOT b.won) AS neither
FROM outcome AS p
JOIN outcome AS b USING (split, game_id)
WHERE p.policy = $policy AND b.policy = $baseline
GROUP BY p.split
ORDER BY p.split;
