-- extend: set the expiry of KEYS[1] to ARGV[2] milliseconds only if it still
-- holds token ARGV[1]. Returns 1 when extended, 0 otherwise.
--
-- PEXPIRE never creates a key, so an expired lock cannot be brought back to
-- life by an extension that arrives late.
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
