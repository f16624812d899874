-- guard_check: whether the Client's credentials let the restart guard do
-- what it does to the master's memory marker KEYS[1] on every vote: read
-- it, read the master's clock (TIME), and write it. memory() (prepended)
-- creates a missing marker, as the first vote would; a marker already
-- there is written back as it is. Any right missing is an error of this
-- script, which New reports (guard.go). Returns {age, longest, born} of
-- the memory, in ms, as a vote reports them: New learns each master's age.
local age, longest, born = memory(KEYS[1], '0', '1', '0')
redis.call('SET', KEYS[1], redis.call('GET', KEYS[1]))
return {age, longest, born}
