-- Back to 00011: new heads take their first id as floor even when a wake note waits (below).
SELECT 1;
