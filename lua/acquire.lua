-- acquire: take KEYS[1] for token ARGV[1] for ARGV[2] milliseconds. When it
-- is taken and ARGV[3] names a channel, publish ARGV[4] there, so that
-- other clients' waiters stand down instead of sending attempts that must
-- fail. Returns {vote, age, longest, born} (a ballot, memory.lua): vote 1
-- when the key now holds our token, 0 when another token holds it, and 3
-- when it took the key but the server refused the notice; age and longest
-- from memory(ARGV[6], ARGV[2], ARGV[5]) (memory.lua, prepended). A
-- refusal adds the holder's fingerprint, a fifth element.
--
-- SET NX PX sets the value and its expiry in one step (pitfall 1: SETNX then
-- EXPIRE). The second branch makes a re-send idempotent: when the driver
-- re-sends this script after a lost reply, the first send may already have
-- set our token, and that must count as success, not as "taken". It makes
-- our key live at least ARGV[2] milliseconds, never shorter: Extend asks a
-- master again to take the key when its earlier call failed, and that call
-- may have set our key for an earlier, shorter TTL (extend.lua's rule).
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
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return ballot(1, age, longest, born)
end
-- The refusal names the holder: the first 32 bits of the SHA-1 of its
-- value without the mark, and its length (0 for a key of another type). A waiter takes the
-- key for held only when a majority of refusals name one holder: the
-- leftovers of other waiters' failed attempts, each its own token, do not
-- (retry.go, takenByAMajority).
local holder = 0
if type(cur) == 'string' then
  local n = #cur
  if string.byte(cur, -1) == 126 then -- '~'
    n = n - 1
  else
    redis.pcall('SET', KEYS[1], cur .. '~', 'KEEPTTL')
  end
  -- A token is 36 bytes; a longer foreign value is named by its length and
  -- first 64 bytes, so that a refusal costs no copy or hash of all of it.
  local ok, h = pcall(redis.sha1hex, string.sub(cur, 1, math.min(n, 64)) .. ' ' .. n)
  if ok then -- a Redis without sha1hex names no holder
    holder = tonumber(string.sub(h, 1, 8), 16)
  end
end
return ballot(0, age, longest, born, holder)
