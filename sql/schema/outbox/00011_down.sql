-- Back to 00010: repair's check ignores wake notes again (the function below).
SELECT 1;
