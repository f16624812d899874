-- acquire: take lock key KEYS[1] for token ARGV[1] for ARGV[2]
-- milliseconds. KEYS[2] is the key's wanted key, KEYS[3] the master's
-- memory marker (only when the restart guard is on, ARGV[5] '1'). When the
-- key is taken and ARGV[3] names a channel, publish ARGV[4] there, so that
-- other clients' waiters stand down instead of sending attempts that must
-- fail. Returns {vote, age, longest, born} (a ballot, memory.lua): vote 1
-- when the key now holds our token, 0 when another value holds it, and 3
-- when it took the key but the server refused the notice; age and longest
-- from memory(KEYS[3], ARGV[2], ARGV[5], ARGV[6]) (memory.lua, prepended).
-- A refusal adds the holder's fingerprint as a number, a fifth element.
--
-- SET NX PX sets the value and its expiry in one step (pitfall 1: SETNX then
-- EXPIRE). The second branch makes a re-send idempotent: when the driver
-- re-sends this script after a lost reply, the first send may already have
-- set our token, and that must count as success, not as "taken". It makes
-- our key live at least ARGV[2] milliseconds, never shorter: Extend asks a
-- master again to take the key when its earlier call failed, and that call
-- may have set our key for an earlier, shorter TTL (extend.lua's rule).
--
-- A key another value holds is never written to. Its refusal is recorded
-- in the wanted key instead (token.lua's mark): its holder then announces
-- its next hand-off, which tells the waiters of other clients who holds the
-- key and tells the holder that they listen. Without the mark, a holder
-- passing the key among its own waiters announces nothing (no PUBLISH per
-- turn while nobody else waits).
--
-- The notice goes through pcall: a Redis 7 ACL user without channel rights
-- gets an error from PUBLISH after the SET ran, and a script is not rolled
-- back, so an error there would leave a key its caller counts as failed.
local age, longest, born = memory(KEYS[3], ARGV[2], ARGV[5], ARGV[6])
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
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return ballot(1, age, longest, born)
end
-- The refusal names the holder by its fingerprint (0 for a key of another
-- type). A waiter takes the key for held only when a majority of refusals
-- name one holder: the leftovers of other waiters' failed attempts, each
-- its own token, do not (retry.go, takenByAMajority).
local fp = fingerprint(cur)
local holder = 0
if fp then
  holder = tonumber(fp, 16)
end
mark(KEYS[1], KEYS[2], fp, ARGV[2])
return ballot(0, age, longest, born, holder)
