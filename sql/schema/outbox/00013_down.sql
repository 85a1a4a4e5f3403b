-- Back to 00012: release and release_lease each do the release themselves again (below).
SELECT 1;
