-- handoff: give lock key KEYS[1], held by token ARGV[1], straight to token
-- ARGV[2] for ARGV[3] milliseconds, or take it for ARGV[2] if it is free.
-- KEYS[2] is the key's wanted key, KEYS[3] the master's memory marker (only
-- when the guard is on, ARGV[6] '1'). When the key is set, ARGV[4] names a
-- channel, and somebody else may listen (the key was free, or the wanted
-- key names its value: token.lua), publish ARGV[5] there. Returns {state,
-- receivers, age, longest, born}: state 2 when ARGV[1]'s key was replaced,
-- 1 when the key was free and is now ARGV[2]'s (or already was: a re-send),
-- 0 when another value holds it; receivers is 0 when nothing was published,
-- 1 plus how many subscribers heard the notice when it was, or -1 when the
-- server refused it (no channel rights); age and longest from
-- memory(KEYS[3], ARGV[3], ARGV[6], ARGV[7]) (memory.lua).
--
-- Check and set run as one script, so the key is never free in between for
-- another client to take (this is how a Client passes a lock to its own next
-- waiter without a release and an acquisition), and a value that is not
-- ARGV[1] is never replaced (pitfall 5).
--
-- When ARGV[8] is '1' (the holder's lock is valid, and ARGV[3] is no longer
-- than its TTL), a key that holds ARGV[1] is replaced without reading the
-- memory marker, and the age is -1 (none reported): this master has held
-- the holder's key since the holder's own round set it, within a lock that
-- kept every other holder out, so it has forgotten no lock that matters,
-- and the marker already records a TTL at least as long. See handoff.go.
--
-- When ARGV[9] is '1', ARGV[2] is a waiter of another client (wants.go),
-- which counts the notices to learn that it holds the key: the script then
-- only replaces ARGV[1]'s key (a free key is left alone, state 0) and
-- always publishes when it does, so that a notice means a replacement.
local cur = redis.pcall('GET', KEYS[1])
local age, longest, born = -1, 0, 0
if not (ARGV[8] == '1' and ours(cur, ARGV[1])) then
  age, longest, born = memory(KEYS[3], ARGV[3], ARGV[6], ARGV[7])
end
if ours(cur, ARGV[2]) then
  return {1, 0, age, longest, born}
end
local remote = ARGV[9] == '1'
if not ours(cur, ARGV[1]) and (cur ~= false or remote) then
  return {0, 0, age, longest, born}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
local receivers = 0
if ARGV[4] ~= '' and (cur == false or remote or wanted(KEYS[2], cur)) then
  receivers = publish(ARGV[4], ARGV[5])
  if type(receivers) == 'table' and receivers.err then
    receivers = -1
  else
    receivers = receivers + 1
  end
end
if cur == false then
  return {1, receivers, age, longest, born}
end
return {2, receivers, age, longest, born}
