-- Finished episodes of one teacher on some splits and modes ($teacher, $splits, $modes): consolidation input.
SELECT episode_id, teacher, mode, game_id, split, task_type, seed, won, max_steps, engine
FROM episodes
WHERE teacher = $teacher AND status = 'finished'
  AND list_contains($splits, split) AND list_contains($modes, mode)
ORDER BY game_id, mode, seed, episode_id;
