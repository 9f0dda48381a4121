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
runs_read(ids)
for _, id in ipairs(ids) do
  local r = run_of(id)
  local worker = r.worker or ''
  local a = cjson.encode({ class = 'worker_lost', http_status = 0,
    detail = 'lease expired at ' .. r.expires .. ' without a heartbeat', started_ms = tonumber(r.expires),
    ended_ms = now })
  record_attempt(id, a, worker, tonumber(r.attempts), tonumber(r.token))
  event(now, 'expired', id, 'lease of ' .. worker .. ' (token ' .. r.token .. ')')
  after_failure(id, arm_of(id), 'worker_lost', 'lease expired', now, 0, 0)
end
return reply(#ids)
