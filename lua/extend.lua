-- extend: if KEYS[1] still holds token ARGV[1], make it live at least
-- ARGV[2] more milliseconds. Returns 1 when the key holds our token (and now
-- lives at least that long), 0 otherwise.
--
-- It never shortens the key: a plain PEXPIRE would, and a shorter extension
-- that fails on the client side (late reply, cancelled ctx), or that runs
-- after a longer one whose reply is still on its way, would then cut a key
-- the holder still trusts until Until. PTTL and PEXPIRE run in one script, so
-- nothing comes between them. (PEXPIRE GT does the same from Redis 7.0 on;
-- this works on 6.x too.)
--
-- PEXPIRE never creates a key, so an expired lock cannot be brought back to
-- life by an extension that arrives late.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
return 0
