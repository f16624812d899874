-- extend: if lock key KEYS[1] still holds token ARGV[1], make it live at
-- least ARGV[2] more milliseconds. KEYS[2] is the key's wanted key, KEYS[3]
-- the master's memory marker (only when the guard is on, ARGV[3] '1').
-- Returns {vote, age, longest, born}: vote 1 when the key holds our token
-- (and now lives at least that long), 2 when it was absent and ARGV[3] is
-- '1' (repair): it holds our token again, for ARGV[2] milliseconds; 0
-- otherwise. age and longest from memory(KEYS[3], ARGV[2], ARGV[3],
-- ARGV[5]) (memory.lua, prepended): the guard and the repair go together.
--
-- It never shortens the key: a plain PEXPIRE would, and a shorter extension
-- that fails on the client side (late reply, cancelled ctx), or that runs
-- after a longer one whose reply is still on its way, would then cut a key
-- the holder still trusts until Until. PTTL and PEXPIRE run in one script, so
-- nothing comes between them. (PEXPIRE GT does the same from Redis 7.0 on;
-- this works on 6.x too.) A wanted key that names our value lives as long.
--
-- Repair puts back a key the master lost (a restart without persistence, a
-- flush) while the lock is valid, so that a lock kept extended survives
-- masters restarting one at a time: only where the master's memory began
-- since the lock was set there (ARGV[4], when its memory began then, is not
-- the marker's), so a late extension never brings back a key that Unlock
-- deleted or that expired. It never touches a key another value holds. The
-- Client counts a repaired master only when the restart guard does not hold
-- it in quarantine: its memory is young, so it may have forgotten another
-- holder's key.
local age, longest, born = memory(KEYS[3], ARGV[2], ARGV[3], ARGV[5])
local cur = redis.pcall('GET', KEYS[1])
if ours(cur, ARGV[1]) then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    if wanted(KEYS[2], cur) then
      redis.call('PEXPIRE', KEYS[2], ARGV[2])
    end
  end
  return ballot(1, age, longest, born)
end
if cur == false and ARGV[3] == '1' and ARGV[4] ~= '0' and tonumber(ARGV[4]) ~= born then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ballot(2, age, longest, born)
end
return ballot(0, age, longest, born)
