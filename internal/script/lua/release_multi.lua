-- release_multi: delete each lock key of KEYS[1..n] that still holds token
-- ARGV[1]; KEYS[n+1..2n] are their wanted keys. When one did and ARGV[2]
-- is a message (Unlock of a held lock, or a failed attempt's clean-up that
-- must be heard), publish it on each key's notice channel, ARGV[2 + i] for
-- KEYS[i], so that the waiters of any of the keys try again at once. When
-- ARGV[3 + n] is '1' (quiet: a failed attempt's clean-up,
-- Lock.releaseNode), only on the channels of the keys deleted here that
-- were marked (token.lua): another client's attempt found them taken, so
-- its waiter listens. Returns what release.lua returns: 0 when no key held
-- our token; otherwise 1 plus the subscribers that heard the notices, or
-- -1 when the server refused a notice (an ACL user without channel rights).
local n = math.floor(#KEYS / 2)
local quiet = ARGV[3 + n] == '1'
local deleted, marked = 0, {}
for i = 1, n do
  local cur = redis.pcall('GET', KEYS[i])
  if ours(cur, ARGV[1]) then
    redis.call('DEL', KEYS[i])
    deleted = deleted + 1
    marked[i] = quiet and wanted(KEYS[n + i], cur)
  end
end
if deleted == 0 then
  return 0
end
if ARGV[2] == '' then
  return 1
end
local heard = 0
for i = 1, n do
  if not quiet or marked[i] then
    local r = publish(ARGV[2 + i], ARGV[2])
    if type(r) == 'table' and r.err then
      return -1
    end
    heard = heard + r
  end
end
return 1 + heard
