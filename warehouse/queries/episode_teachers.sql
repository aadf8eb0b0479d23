-- Every policy name that has episodes.
SELECT DISTINCT teacher FROM episodes ORDER BY teacher;
