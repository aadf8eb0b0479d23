-- Consolidation cost per teacher and consolidator: everything the runs spent (per-episode annotation
-- calls and the LLM bank editor's calls), from consolidation_runs; calls = annotation attempts.
CREATE OR REPLACE VIEW audit_cost AS
WITH spent AS (
    SELECT teacher, consolidator,
           sum(input_tokens)  AS input_tokens,
           sum(output_tokens) AS output_tokens,
           sum(cost_usd)      AS cost_usd
    FROM consolidation_runs
    GROUP BY ALL
),
calls AS (
    SELECT teacher, consolidator, sum(attempts) AS calls FROM consolidated_episodes GROUP BY ALL
)
SELECT teacher, consolidator, calls.calls, spent.input_tokens, spent.output_tokens, spent.cost_usd
FROM spent LEFT JOIN calls USING (teacher, consolidator);
