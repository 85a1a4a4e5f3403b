-- Whether a text shows nothing: true when it is empty or made only of white space (every character
-- of Unicode's White_Space property) or of the zero-width format characters that render as nothing
-- (U+180E, U+200B..U+200D, U+2060, U+FEFF); NULL for NULL. The class is spelled out code point by
-- code point rather than [[:space:]], whose meaning follows the database's ctype (ASCII only under
-- C, the clusters' --no-locale), so the answer is the same in every database. The names, channels,
-- targets and notes of schema alr use it. (LANGUAGE sql, but not inlined: a pinned search_path,
-- which every alr function has, keeps the planner from inlining; none of its callers is hot.)
CREATE OR REPLACE FUNCTION alr._is_blank(p_value text)
RETURNS boolean
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT p_value !~ '[^\u0009-\u000d\u0020\u0085\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]';
$$;
