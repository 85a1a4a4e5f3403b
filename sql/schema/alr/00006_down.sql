DROP FUNCTION alr.version();
