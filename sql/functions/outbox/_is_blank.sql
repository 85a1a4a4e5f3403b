-- Whether p_text is empty or white space only: ASCII white space, every Unicode space and line or
-- paragraph separator, and the invisible format characters that read as nothing (zero-width
-- spaces and joiners, the word joiner, the byte order mark). Spelled out: [[:space:]] alone
-- follows the database's LC_CTYPE, which is ASCII only under C (how --no-locale clusters run), and
-- an ideographic space passed for a name. NULL for NULL.
CREATE OR REPLACE FUNCTION outbox._is_blank(p_text text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT p_text !~ '[^[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]'
$$;
