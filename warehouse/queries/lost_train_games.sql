-- Train games a policy ($policy: a model version, or a decoding variant such as '<version>.no-repeat' or
-- '<version>.unconstrained') played to the end at a step budget ($max_steps) and never won: the curriculum of `evoharness grpo --curriculum-from`.
SELECT game_id
FROM episodes
WHERE teacher = $policy AND split = 'train' AND max_steps = $max_steps AND status = 'finished'
GROUP BY game_id
HAVING NOT bool_or(won)
ORDER BY game_id;
