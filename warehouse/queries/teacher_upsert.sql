-- Insert or replace one teacher registry entry (parameters: the TeacherSpec.warehouse_row() fields).
INSERT OR REPLACE INTO teachers (
    name, provider, model, base_url, api_key_env, price_in, price_out, max_concurrency, temperature,
    max_tokens, mode, prompt_template, retry, spec_sha256, updated_at, distill_games,
    constrain_actions, max_spend_usd, auto_distill, in_registry, avoid_repeats, bank_version,
    structured_outputs
) VALUES (
    $name, $provider, $model, $base_url, $api_key_env, $price_in, $price_out, $max_concurrency, $temperature,
    $max_tokens, $mode, $prompt_template, $retry, $spec_sha256, $updated_at, $distill_games,
    $constrain_actions, $max_spend_usd, $auto_distill, true, $avoid_repeats, $bank_version,
    $structured_outputs
);
