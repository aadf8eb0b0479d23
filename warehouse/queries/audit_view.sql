-- Every row of one audit view ($view: a view name the caller has checked), in a stable order.
SELECT * FROM query_table($view) ORDER BY ALL;
