-- memory: the master's memory marker, for the restart guard. Given to the
-- scripts that vote (acquire, extend, handoff, and their multi-key
-- forms), and run alone by New to check the Client's rights (guard.go).
--
-- The marker ("redlock:memory" on a plain master) holds "<born> <ttl>":
-- when this master's memory began, in milliseconds of its own clock, and the longest TTL any script granted here since, in
-- milliseconds. The first script that finds it missing creates it (SET
-- NX semantics: one script at a time), so a master that lost its data (a
-- restart without persistence, FLUSHALL, a failover to an empty replica)
-- gets a young marker, while one restarted with its data keeps its age.
--
-- memory(marker, ttl, on, known) records ttl and returns the memory's age,
-- the longest TTL and when the memory began, in milliseconds; the age is 0,
-- never negative, for a memory born after the clock's now (the master's
-- clock stepped back since): as young as can be. -1 for the age
-- (and 0 for the rest) when the guard is off (on is not '1'), and then the
-- marker is neither declared nor touched. known is when the memory the
-- Client last learned of began ('0': none); when the marker still says so,
-- the age is -2 and nothing but the marker is read: the Client counts the
-- age from what it learned (one GET instead of TIME, GET and the clock
-- arithmetic on every vote).
--
-- The marker is declared in KEYS, as every key a script touches must be
-- (Cluster routing, ACL key checks, servers that enforce the contract). It
-- fails closed: a marker the script cannot read or write (a key of another
-- type, a refused TIME or SET) is an error of the whole script, raised
-- before the script writes anything, so the master's answer is no vote at
-- all, never a vote the guard cannot judge. (On a Redis Cluster master the
-- marker shares the lock key's hash slot, as it must.)
local function memory(marker, ttl, on, known)
  if on ~= '1' then
    return -1, 0, 0
  end
  local v = redis.call('GET', marker)
  ttl = tonumber(ttl)
  local born, longest
  if v then
    born, longest = string.match(v, '^(%d+) (%d+)$')
  end
  if born and born == known and ttl <= tonumber(longest) then
    -- The memory the Client knows, its longest TTL unchanged: the Client
    -- has its age already, counted on its own clock since it learned it.
    return -2, tonumber(longest), tonumber(born)
  end
  if redis.replicate_commands then
    redis.replicate_commands() -- Redis 6: TIME before a write needs it
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not born then
    born, longest = now, ttl
  else
    born, longest = tonumber(born), tonumber(longest)
    if ttl <= longest then
      return math.max(0, now - born), longest, born
    end
    longest = ttl
  end
  redis.call('SET', marker, string.format('%d %d', born, longest))
  return math.max(0, now - born), longest, born
end

-- ballot(vote, age, longest, born, holder) is a voting script's reply: the
-- array {vote, age, longest, born}, with holder after them when given (an
-- acquire script's refusal: acquire.lua); or, when the memory is the one
-- the Client knows (age -2) and there is no holder, the one integer vote +
-- 4 * longest (vote is 0 to 3): the Client has the rest, and reads an
-- integer with one allocation, an array with four.
local function ballot(vote, age, longest, born, holder)
  if age == -2 and not holder then
    return vote + 4 * longest
  end
  return {vote, age, longest, born, holder}
end
