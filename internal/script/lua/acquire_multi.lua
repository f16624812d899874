-- acquire_multi: take every lock key of KEYS[1..n] for token ARGV[1] for
-- ARGV[2] milliseconds, or none of them. KEYS[n+1..2n] are
-- their wanted keys, in the same order, and KEYS[2n+1] the master's memory
-- marker (only when the guard is on, ARGV[3] '1'). Returns what
-- acquire.lua returns (a ballot: vote 1 when every key now holds our
-- token, 0 when another value holds one of them), with age and longest
-- from memory(KEYS[2n+1], ARGV[2], ARGV[3], ARGV[4]) (memory.lua,
-- prepended).
--
-- All or nothing on this master: the keys are read first, and only when
-- none is held by another token (or by a value of another kind) are they
-- set, each with its expiry in one SET PX (pitfall 1). A key that already
-- holds our token is a re-send of this script after a lost reply, and
-- counts as ours. A key another value holds is never written to; its
-- refusal is recorded in its wanted key, as acquire.lua does, so that its
-- holder announces its next hand-off.
--
-- No acquired notice: a multi-key lock's waiters of other Clients learn of
-- it from their failed attempts, and of its release from the release
-- notices on each key's channel (release_multi.lua).
local n = math.floor(#KEYS / 2)
local age, longest, born = memory(KEYS[2 * n + 1], ARGV[2], ARGV[3], ARGV[4])
local held = false
for i = 1, n do
  local cur = redis.pcall('GET', KEYS[i])
  if cur and not ours(cur, ARGV[1]) then
    held = true
    mark(KEYS[i], KEYS[n + i], fingerprint(cur), ARGV[2])
  end
end
if held then
  return ballot(0, age, longest, born)
end
for i = 1, n do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return ballot(1, age, longest, born)
