-- heartbeat: extends the leases still held under their tokens.
-- KEYS[1] meta. ARGV: now_ms, ttl_ms, then pairs run_id, token.
-- Atomic per call. Returns the pairs (run_id, token) no longer held.
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local lost = {}
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if is_current(id, token) then
    redis.call('HSET', P .. 'run:' .. id, 'expires', now + ttl)
    redis.call('ZADD', P .. 'leases', now + ttl, id)
  else
    table.insert(lost, id)
    table.insert(lost, token)
  end
end
return lost
