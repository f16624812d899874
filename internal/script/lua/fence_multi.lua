-- fence_multi: the fence of a multi-key lock. KEYS[1..n] are the lock's
-- keys and KEYS[n+1..2n] their fencing counters, in the same order; token
-- ARGV[1] must hold every key, or nothing changes and the script returns
-- nil. ARGV[2] as in fence.lua: empty to draw, a number f to raise.
--
-- Drawing: every counter missing is created at the master's clock in
-- microseconds (fence.lua says why); the highest is incremented, and every
-- other is raised to it. The fence is then above every fence any holder of
-- any of the keys drew here before, and every counter of the keys is at
-- it, so that a later holder of any one of them draws above it.
--
-- Raising: every counter is raised to at least f; the highest counter is
-- returned. Decimal strings without leading zeros, compared by length,
-- then digit by digit (a Lua number would round past 2^53); INCR runs on
-- the server, in 64 bits.
local n = #KEYS / 2
for i = 1, n do
  if not ours(redis.pcall('GET', KEYS[i]), ARGV[1]) then
    return false
  end
end
local function above(a, b)
  return #a > #b or (#a == #b and a > b)
end
local target = ARGV[2]
if target == '' then
  local top, topValue
  for i = n + 1, 2 * n do
    local c = redis.call('GET', KEYS[i])
    if not c then
      if redis.replicate_commands then
        redis.replicate_commands() -- Redis 6: TIME before a write needs it
      end
      c = '0'
      local t = redis.pcall('TIME') -- without the right (ACL): from 0
      if type(t) == 'table' and not t.err then
        c = t[1] .. string.format('%06d', tonumber(t[2]))
      end
      redis.call('SET', KEYS[i], c)
    end
    if not top or above(c, topValue) then
      top, topValue = i, c
    end
  end
  redis.call('INCR', KEYS[top])
  target = redis.call('GET', KEYS[top])
end
local highest = target
for i = n + 1, 2 * n do
  local c = redis.call('GET', KEYS[i])
  if not c or above(target, c) then
    redis.call('SET', KEYS[i], target)
  elseif above(c, highest) then
    highest = c
  end
end
return highest
