-- A game whose catalog split changed (the dev split is carved from train) takes its new split ($game_id, $split).
UPDATE games SET split = $split WHERE game_id = $game_id AND split <> $split;
