-- Measured tokens and text length per turn, per teacher in one mode: a dry run's tokens per turn come
-- from the teacher's own measured turns, else from the length of the expert's turns at the measured
-- characters per token of every priced teacher.
SELECT
    e.teacher,
    count(*)                                                    AS turns,
    count(s.input_tokens)                                       AS measured_turns,
    sum(s.input_tokens)                                         AS input_tokens,
    sum(s.output_tokens)                                        AS output_tokens,
    sum(length(s.prompt))                                       AS prompt_chars,
    sum(length(s.raw_output))                                   AS output_chars,
    sum(length(s.prompt)) FILTER (WHERE s.input_tokens IS NOT NULL)      AS measured_prompt_chars,
    sum(length(s.raw_output)) FILTER (WHERE s.output_tokens IS NOT NULL) AS measured_output_chars
FROM steps s
JOIN episodes e USING (episode_id)
WHERE e.mode = $mode
GROUP BY e.teacher;
