-- heartbeat: extends the leases still held under their tokens.
-- KEYS[1] meta. ARGV: now_ms, ttl_ms, worker, then pairs run_id, token.
-- A lease the ledger lost in a rollback is taken back (common.lua
-- `reclaim`). Atomic per call. Returns the pairs (run_id, token) no longer
-- held.
local now, ttl, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local stop = guard() if stop then return stop end
local lost = {}
local ids = {}
for i = 4, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
runs_read(ids)
local expires = int(now + ttl)
for i = 4, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if is_current(id, token) then
    run_changed(id, run_of(id)).expires = expires
    redis.call('ZADD', P .. 'leases', now + ttl, id)
  elseif not reclaim(id, token, worker, now, ttl) then
    table.insert(lost, id)
    table.insert(lost, token)
  end
end
return lost
