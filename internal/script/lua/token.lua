-- ours: whether v, a lock key's value, is token's. A lock key holds nothing
-- or exactly its holder's token: no script writes anything else to it.
-- The functions of this file and memory.lua are the scripts' helpers: each
-- script is given those it calls, prepended, and no other (prelude.go).
local function ours(v, token)
  return v == token
end

-- fingerprint: the name of a lock key's value v without a copy of it: the
-- first 32 bits of the SHA-1 of its first 64 bytes and its length, as 8 hex
-- digits; false for a value that is not a string (a key of another type),
-- or on a Redis without sha1hex.
local function fingerprint(v)
  if type(v) ~= 'string' then
    return false
  end
  local ok, h = pcall(redis.sha1hex, string.sub(v, 1, 64) .. ' ' .. #v)
  if not ok then
    return false
  end
  return string.sub(h, 1, 8)
end

-- wanted: whether the wanted key w (the lock key's own, declared, in its
-- slot) says that a waiter of another Client was refused by v since v was
-- set: it holds v's fingerprint. The lock key itself is never marked.
-- pcall: a wanted key of another type says nothing. named(m, v): whether
-- m, a wanted key's value as read, names v so.
local function named(m, v)
  return type(m) == 'string' and m == fingerprint(v)
end

local function wanted(w, v)
  return named(redis.pcall('GET', w), v)
end

-- mark: record in the wanted key w that lock key k's value, whose
-- fingerprint is fp (another holder's token, or a foreign value), refused a
-- waiter: w holds fp, and lives as long as k does (ttl ms when k has no
-- expiry), so it never outlives the value it names by much. Nothing is
-- written to k.
local function mark(k, w, fp, ttl)
  if not fp or redis.pcall('GET', w) == fp then
    return
  end
  local pt = redis.call('PTTL', k)
  if pt <= 0 then
    pt = ttl
  end
  redis.pcall('SET', w, fp, 'PX', pt)
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
