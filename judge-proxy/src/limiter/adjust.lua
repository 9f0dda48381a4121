-- adjust.lua: move timelines by corrections: a give-back (a caller left
-- before its slot) or a large token reconciliation that should not wait
-- for this replica's next booking. Mirrors gcra.rs `adjust`.
--
-- KEYS: pairs (request TAT, token TAT) of the timelines corrected
--   ({P:jp:U}:team:T:rpm, {P:jp:U}:team:T:tpm), one pair per correction.
-- ARGV: 1 now (0: the server's TIME), then per correction: request µs,
--   token µs (signed: positive charges from now, negative gives back and
--   never goes below now).
-- Returns 1.
--
-- Atomicity: one script, so the read-add-write of each key cannot
-- interleave with a booking.

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function shift(key, d)
  if d == 0 then return end
  local tat = tonumber(redis.call('GET', key) or '0')
  if d > 0 then tat = math.max(tat, now) + d else tat = math.max(tat + d, now) end
  local ttl = math.max(math.ceil((tat - now) / 1000), 0) + 60000
  redis.call('SET', key, string.format('%.0f', tat), 'PX', ttl)
end
for k = 0, #KEYS / 2 - 1 do
  shift(KEYS[1 + 2 * k], tonumber(ARGV[2 + 2 * k]))
  shift(KEYS[2 + 2 * k], tonumber(ARGV[3 + 2 * k]))
end
return 1
