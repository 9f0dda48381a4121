-- pause.lua: pause an upstream for every replica after a provider 429 with
-- Retry-After: no request is admitted before the pause ends.
--
-- KEYS: 1 upstream pause-until {P:jp:U}:pause (µs since the Unix epoch)
-- ARGV: 1 pause length (µs)
-- Returns the pause-until in force (µs).
--
-- Atomicity: one script, so a shorter pause never overwrites a longer one
-- set by another replica (the later end wins). Uses the server's TIME, the
-- clock acquire.lua checks the pause against.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local pause_end = now + tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current >= pause_end then return current end
redis.call('SET', KEYS[1], string.format('%.0f', pause_end), 'PX', math.ceil(tonumber(ARGV[1]) / 1000) + 1000)
return pause_end
