-- reconcile.lua: move token TATs by the difference between the tokens a
-- call was estimated at and the tokens the provider reported (negative:
-- capacity is given back). Mirrors gcra.rs `reconcile`.
--
-- KEYS: 1 upstream token TAT {P:jp:U}:tpm   2 team token TAT {P:jp:U}:team:T:tpm
-- ARGV: 1 upstream delta (µs, signed)  2 team delta (µs, signed; 0 when the
--       request was borrowed and the team's bucket was never charged)
-- Returns 1.
--
-- Atomicity: one script, so the read-add-write of each key cannot
-- interleave with an acquire. A key that expired stays absent: an idle
-- bucket owes nothing.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function shift(key, delta)
  if delta == 0 then return end
  local v = redis.call('GET', key)
  if not v then return end
  local value = tonumber(v) + delta
  local ttl = math.max(math.ceil((value - now) / 1000), 0) + 60000
  redis.call('SET', key, string.format('%.0f', value), 'PX', ttl)
end
shift(KEYS[1], tonumber(ARGV[1]))
shift(KEYS[2], tonumber(ARGV[2]))
return 1
