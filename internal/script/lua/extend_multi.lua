-- extend_multi: if every lock key of KEYS[1..n] still holds token ARGV[1],
-- make each live at least ARGV[2] more milliseconds (never shortening one,
-- as extend.lua, and its wanted key with it). KEYS[n+1..2n] are their
-- wanted keys, KEYS[2n+1] the master's memory marker (only when the guard
-- is on, ARGV[3] '1'). Returns a ballot: vote 1 when every key holds our
-- token (and now lives at least that long), 0 otherwise, changing nothing
-- then; age and longest from memory(KEYS[2n+1], ARGV[2], ARGV[3], ARGV[4])
-- (memory.lua, prepended). No repair: a master that lost the keys votes no.
local n = math.floor(#KEYS / 2)
local age, longest, born = memory(KEYS[2 * n + 1], ARGV[2], ARGV[3], ARGV[4])
for i = 1, n do
  if not ours(redis.pcall('GET', KEYS[i]), ARGV[1]) then
    return ballot(0, age, longest, born)
  end
end
for i = 1, n do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    if wanted(KEYS[n + i], ARGV[1]) then
      redis.call('PEXPIRE', KEYS[n + i], ARGV[2])
    end
  end
end
return ballot(1, age, longest, born)
