-- One definition per metric, used by every view and query (docs/audit.md, "Metric definitions").
-- success_rate = won / finished episodes. A `failed` episode (the policy could not be run: an API error
-- past its retries, a crashed worker) is not a loss of the policy; every view shows it in `failed`.
CREATE OR REPLACE MACRO metric_success_rate(won, finished) AS round(won / nullif(finished, 0), 3);
