-- The split of each of some games ($game_ids).
SELECT game_id, split FROM games WHERE list_contains($game_ids, game_id);
