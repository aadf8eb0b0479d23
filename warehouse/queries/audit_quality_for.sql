-- The headline audit of one teacher and consolidator ($teacher, $consolidator).
SELECT belief_precision, belief_recall, progress_validity, parse_validity, episode_coverage, examples, meta_share
FROM audit_quality
WHERE teacher = $teacher AND consolidator = $consolidator;
