-- ours: whether v, a lock key's value, is token's. The value is the token,
-- or the token marked with a '~' after it: another client's attempt found
-- the key taken since it was set (acquire.lua), so somebody else waits. A
-- holder's hand-off announces itself only then (handoff.lua). Prepended to
-- every script.
local function ours(v, token)
  return v == token or v == token .. '~'
end

-- publish: PUBLISH message on channel; on a Redis Cluster master, where the
-- channel is a shard channel in the key's slot ('{', notice.go), SPUBLISH,
-- which counts exactly the subscribers that hear it (a script's PUBLISH
-- counts only its own shard's, though every node delivers it). A plain
-- channel begins with the notice prefix, never with '{'. pcall: an ACL
-- user without channel rights gets an error, returned as a table.
local function publish(channel, message)
  if string.byte(channel, 1) == 123 then
    return redis.pcall('SPUBLISH', channel, message)
  end
  return redis.pcall('PUBLISH', channel, message)
end
