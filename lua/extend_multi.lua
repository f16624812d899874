-- extend_multi: if every key of KEYS still holds token ARGV[1], make each
-- live at least ARGV[2] more milliseconds (never shortening one, as
-- extend.lua). Returns a ballot: vote 1 when every key holds our token (and
-- now lives at least that long), 0 otherwise, changing nothing then; age
-- and longest from memory(ARGV[4], ARGV[2], ARGV[3], ARGV[5]) (memory.lua,
-- prepended). No repair: a master that lost the keys votes no.
local age, longest, born = memory(ARGV[4], ARGV[2], ARGV[3], ARGV[5])
for i = 1, #KEYS do
  if not ours(redis.pcall('GET', KEYS[i]), ARGV[1]) then
    return ballot(0, age, longest, born)
  end
end
for i = 1, #KEYS do
  if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
end
return ballot(1, age, longest, born)
