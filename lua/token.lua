-- ours: whether v, a lock key's value, is token's. The value is the token,
-- or the token marked with a '~' after it: another client's attempt found
-- the key taken since it was set (acquire.lua), so somebody else waits. A
-- holder's hand-off announces itself only then (handoff.lua). Prepended to
-- every script.
local function ours(v, token)
  return v == token or v == token .. '~'
end
