-- expire: leases whose time has passed become worker_lost attempts, and
-- the retry policy decides each run. KEYS[1] meta. ARGV: now_ms, limit.
-- Atomic per call; at most `limit` leases per call. Nothing expires while
-- the ledger recovers from a restart (its holders are taking their leases
-- back). Returns {how many expired, the acknowledgement sequence, epoch}.
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local stop = guard() if stop then return stop end
local function reply(n)
  local m = redis.call('HMGET', META, 'seq', 'epoch')
  return { n, tonumber(m[1] or '0'), tonumber(m[2] or '1') }
end
if recovering(now) then return reply(0) end
local ids = redis.call('ZRANGEBYSCORE', P .. 'leases', '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
  local r = redis.call('HMGET', P .. 'run:' .. id, 'attempts', 'token', 'worker', 'expires')
  local a = cjson.encode({ class = 'worker_lost', http_status = 0,
    detail = 'lease expired at ' .. r[4] .. ' without a heartbeat', started_ms = tonumber(r[4]), ended_ms = now })
  record_attempt(id, a, r[3], tonumber(r[1]), tonumber(r[2]))
  event(now, 'expired', id, 'lease of ' .. r[3] .. ' (token ' .. r[2] .. ')')
  after_failure(id, arm_of(id), 'worker_lost', 'lease expired', now, 0, 0)
end
return reply(#ids)
