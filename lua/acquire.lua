-- acquire: take KEYS[1] for token ARGV[1] for ARGV[2] milliseconds. When it
-- is taken and ARGV[3] names a channel, publish ARGV[4] there, so that
-- other clients' waiters stand down instead of sending attempts that must
-- fail. Returns {vote, age, longest, born}: vote 1 when the key now holds
-- our token, 0 when another token holds it, and 3 when it took the key but the
-- server refused the notice; age and longest from memory(ARGV[6], ARGV[2],
-- ARGV[5]) (memory.lua, prepended).
--
-- SET NX PX sets the value and its expiry in one step (pitfall 1: SETNX then
-- EXPIRE). The second branch makes a re-send idempotent: when the driver
-- re-sends this script after a lost reply, the first send may already have
-- set our token, and that must count as success, not as "taken".
--
-- A key another token holds is marked as wanted (token.lua), once, keeping
-- its expiry: its holder then announces its next hand-off, which tells the
-- waiters of other clients who holds the key and tells the holder that they
-- listen. Without the mark, a holder passing the key among its own waiters
-- announces nothing (no PUBLISH per turn while nobody else waits). pcall:
-- without KEEPTTL (Redis < 6) there is no mark, and the hand-offs stay
-- silent until the waiter's next attempt after a release.
--
-- The notice goes through pcall: a Redis 7 ACL user without channel rights
-- gets an error from PUBLISH after the SET ran, and a script is not rolled
-- back, so an error there would leave a key its caller counts as failed.
local age, longest, born = memory(ARGV[6], ARGV[2], ARGV[5], ARGV[7])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] ~= '' then
    local r = publish(ARGV[3], ARGV[4])
    if type(r) == 'table' and r.err then
      return ballot(3, age, longest, born)
    end
  end
  return ballot(1, age, longest, born)
end
-- pcall: a key of another type is simply not ours.
local cur = redis.pcall('GET', KEYS[1])
if ours(cur, ARGV[1]) then
  return ballot(1, age, longest, born)
end
if type(cur) == 'string' and string.byte(cur, -1) ~= 126 then -- '~'
  redis.pcall('SET', KEYS[1], cur .. '~', 'KEEPTTL')
end
return ballot(0, age, longest, born)
