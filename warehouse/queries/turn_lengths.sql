-- What one GRPO or SFT turn costs, measured on a policy's episodes ($teacher, $mode): turns per episode and
-- characters per turn of the prompt (the rendered system + turn text, rebuilt every turn) and of the answer,
-- with the token counts the policy's client recorded (NULL when it records none). docs/gpu_estimate.md.
WITH per_episode AS (
    SELECT e.episode_id, e.won, count(*) AS turns
    FROM episodes e JOIN steps s USING (episode_id)
    WHERE e.teacher = $teacher AND e.mode = $mode AND e.status = 'finished'
    GROUP BY ALL
), per_turn AS (
    SELECT length(s.prompt) AS prompt_chars, length(s.raw_output) AS output_chars, s.input_tokens, s.output_tokens
    FROM episodes e JOIN steps s USING (episode_id)
    WHERE e.teacher = $teacher AND e.mode = $mode AND e.status = 'finished'
)
SELECT
    (SELECT count(*) FROM per_episode) AS episodes,
    (SELECT avg(won::INT) FROM per_episode) AS success_rate,
    (SELECT avg(turns) FROM per_episode) AS turns_per_episode,
    (SELECT quantile_cont(turns, 0.95) FROM per_episode) AS p95_turns_per_episode,
    (SELECT max(turns) FROM per_episode) AS max_turns_per_episode,
    avg(prompt_chars) AS prompt_chars_per_turn,
    quantile_cont(prompt_chars, 0.95) AS p95_prompt_chars,
    avg(output_chars) AS output_chars_per_turn,
    avg(input_tokens) AS recorded_input_tokens_per_turn,
    avg(output_tokens) AS recorded_output_tokens_per_turn
FROM per_turn;
