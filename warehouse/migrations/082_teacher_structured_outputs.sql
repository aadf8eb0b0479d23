-- How an openai_compatible server takes the action constraint (vllm, vllm-guided, sglang; NULL: unconstrained).
ALTER TABLE teachers ADD COLUMN IF NOT EXISTS structured_outputs VARCHAR;
