-- release_multi: delete each key of KEYS that still holds token ARGV[1].
-- When one did and ARGV[2] is a message (Unlock of a held lock), publish
-- it on each key's notice channel, ARGV[2 + i] for KEYS[i], so that the
-- waiters of any of the keys try again at once. Returns what
-- release.lua returns: 0 when no key held our token; otherwise 1 plus the
-- subscribers that heard the notices, or -1 when the server refused a
-- notice (an ACL user without channel rights).
local deleted = 0
for i = 1, #KEYS do
  if ours(redis.pcall('GET', KEYS[i]), ARGV[1]) then
    redis.call('DEL', KEYS[i])
    deleted = deleted + 1
  end
end
if deleted == 0 then
  return 0
end
if ARGV[2] == '' then
  return 1
end
local heard = 0
for i = 1, #KEYS do
  local r = publish(ARGV[2 + i], ARGV[2])
  if type(r) == 'table' and r.err then
    return -1
  end
  heard = heard + r
end
return 1 + heard
