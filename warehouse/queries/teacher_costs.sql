-- Cost accounting per teacher and mode (the teacher_costs view), most successful first.
SELECT * FROM teacher_costs ORDER BY success_rate DESC NULLS LAST, teacher, mode;
