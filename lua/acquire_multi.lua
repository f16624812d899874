-- acquire_multi: take every key of KEYS for token ARGV[1] for ARGV[2]
-- milliseconds, or none of them. Returns what acquire.lua returns (a
-- ballot: vote 1 when every key now holds our token, 0 when another token
-- holds one of them), with age and longest from memory(ARGV[4], ARGV[2],
-- ARGV[3], ARGV[5]) (memory.lua, prepended).
--
-- All or nothing on this master: the keys are read first, and only when
-- none is held by another token (or by a value of another kind) are they
-- set, each with its expiry in one SET PX (pitfall 1). A key that already
-- holds our token is a re-send of this script after a lost reply, and
-- counts as ours. A key another token holds is marked as wanted, as
-- acquire.lua does, so that its holder announces its next hand-off.
--
-- No acquired notice: a multi-key lock's waiters of other Clients learn of
-- it from their failed attempts, and of its release from the release
-- notices on each key's channel (release_multi.lua).
local age, longest, born = memory(ARGV[4], ARGV[2], ARGV[3], ARGV[5])
local held = false
for i = 1, #KEYS do
  local cur = redis.pcall('GET', KEYS[i])
  if cur and not ours(cur, ARGV[1]) then
    held = true
    if type(cur) == 'string' and string.byte(cur, -1) ~= 126 then -- '~'
      redis.pcall('SET', KEYS[i], cur .. '~', 'KEEPTTL')
    end
  end
end
if held then
  return ballot(0, age, longest, born)
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return ballot(1, age, longest, born)
