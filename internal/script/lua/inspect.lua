-- inspect: what KEYS[1] holds, read-only: {value, pttl}, value false (nil)
-- when the key is absent or not a string (not a lock's), pttl as PTTL
-- returns it (-2 absent, -1 no expiry). It only reads, so it runs on a
-- master at maxmemory too. GET and PTTL in one script: the key cannot
-- expire or change between them.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  if not string.find(v.err, 'WRONGTYPE', 1, true) then
    return v -- an ACL user without the key: the master cannot tell us
  end
  v = false -- a key of another type: it exists, but holds no token
end
return {v, redis.call('PTTL', KEYS[1])}
