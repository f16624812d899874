-- fence: the fencing counter KEYS[2] of lock key KEYS[1], for the holder of
-- token ARGV[1] only. Returns -1, and changes nothing, when KEYS[1] does not
-- hold that token.
--
-- ARGV[2] empty: increment the counter and return its new value. Every
-- Fence starts here, so a holder's values are above every value a master of
-- its majority had when it took the key there: the key was free, so any
-- earlier holder's write-back there came first.
--
-- ARGV[2] a number f: raise the counter to at least f (the write-back) and
-- return its value. Never lowers it.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
if ARGV[2] == '' then
  return redis.call('INCR', KEYS[2])
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
  return tonumber(ARGV[2])
end
return c
