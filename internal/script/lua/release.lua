-- release: delete lock key KEYS[1] only if it still holds token ARGV[1].
-- KEYS[2] is the key's wanted key. When the key held our token and ARGV[2]
-- names a channel (Unlock of a held lock), publish ARGV[3] there, so that
-- waiters subscribed to it try again at once instead of at their next
-- backoff. Clean-up after failed attempts stays silent: announcing it
-- would wake every waiter into another split vote.
-- When ARGV[4] is '1', the holder's acquisition announced nothing (no
-- waiter of its client watched the key), so only a waiter that found the
-- key taken since listens, and that waiter marked it (token.lua): the
-- notice goes out only when the wanted key names our value. A lock nobody
-- else wanted then costs no PUBLISH.
-- Returns 0 when the key was absent or another's; when our key was deleted,
-- 1 plus the number of subscribers that heard the notice, or -1 when the
-- server refused the notice (an ACL user without channel rights).
--
-- Check and delete run as one script, so no other client's SET can land
-- between them (pitfall 6), and a value that is not ours is never deleted
-- (pitfall 5).
--
-- One MGET reads the key and its wanted key (one command, where two GETs
-- cost a master twice the script's time in calls); a key of another type
-- reads as nil, as a failed GET's pcall would. A user whose ACL lacks MGET
-- (docs/operations.md's rule before it was added) gets the two GETs.
local got = redis.pcall('MGET', KEYS[1], KEYS[2])
local cur, mark = got[1], got[2]
if got.err then
  cur, mark = redis.pcall('GET', KEYS[1]), nil
end
if ours(cur, ARGV[1]) then
  redis.call('DEL', KEYS[1])
  if got.err and ARGV[2] ~= '' and ARGV[4] == '1' then
    mark = redis.pcall('GET', KEYS[2])
  end
  if ARGV[2] ~= '' and (ARGV[4] ~= '1' or named(mark, cur)) then
    local r = publish(ARGV[2], ARGV[3])
    if type(r) == 'table' and r.err then
      return -1
    end
    return 1 + r
  end
  return 1
end
return 0
