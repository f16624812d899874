-- fence: the fencing counter KEYS[2] of lock key KEYS[1], for the holder of
-- token ARGV[1] only. Returns nil, and changes nothing, when KEYS[1] does
-- not hold that token; otherwise the counter's value, as a string (a Lua
-- number is a double: past 2^53 it would round, and two holders could get
-- the same fence).
--
-- ARGV[2] empty: increment the counter (creating it at the master's clock)
-- and return its new value. Every
-- Fence starts here, so a holder's values are above every value a master of
-- its majority had when it took the key there: the key was free, so any
-- earlier holder's write-back there came first.
--
-- ARGV[2] a number f: raise the counter to at least f (the write-back) and
-- return its value. Never lowers it. Both are decimal strings without
-- leading zeros, compared by length, then digit by digit.
if not ours(redis.pcall('GET', KEYS[1]), ARGV[1]) then
  return false
end
if ARGV[2] == '' then
  if not redis.call('GET', KEYS[2]) then
    -- A new counter starts at the master's clock in microseconds, not at
    -- 0: a master that lost its counters (a restart without persistence,
    -- a flush) then starts above every fence issued before, which counted
    -- from older clock readings one increment at a time.
    if redis.replicate_commands then
      redis.replicate_commands() -- Redis 6: TIME before a write needs it
    end
    local t = redis.pcall('TIME') -- without the right (ACL): from 0
    if type(t) == 'table' and not t.err then
      redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])))
    end
  end
  redis.call('INCR', KEYS[2])
  return redis.call('GET', KEYS[2])
end
local c = redis.call('GET', KEYS[2])
if not c or #ARGV[2] > #c or (#ARGV[2] == #c and ARGV[2] > c) then
  redis.call('SET', KEYS[2], ARGV[2])
  return ARGV[2]
end
return c
