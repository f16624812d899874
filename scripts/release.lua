-- release: delete KEYS[1] only if it still holds token ARGV[1], and announce
-- the release on channel ARGV[2] (the token is the message) so that waiters
-- subscribed there try again at once instead of at their next backoff.
-- Returns 1 when our key was deleted, 0 when it was absent or another's.
--
-- Check and delete run as one script, so no other client's SET can land
-- between them (pitfall 6), and a token that is not ours is never deleted
-- (pitfall 5).
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[1])
  return 1
end
return 0
