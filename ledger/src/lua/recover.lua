-- recover: confirms the ledger on a server that restarted or was replaced
-- (common.lua `guard` refuses every change until this has run), and starts
-- a new epoch. KEYS[1] meta. ARGV: now_ms, grace_ms, and what the caller
-- saw before: known_seq, known_token, known_epoch (0 when it saw nothing).
-- Atomic. In one step it:
--   - records the live server's run id, so other scripts run again;
--   - moves the epoch past both the stored one and the caller's: workers
--     that see it replay the reports their journals hold;
--   - moves the token counter 2^32 past both (`token_floor` marks where the
--     new epoch's tokens start): no token issued before, lost or not, is
--     ever issued again, so a stale holder is never taken for the current
--     one; tokens below the floor may only take back a lease the rollback
--     lost (common.lua `reclaim`);
--   - keeps the acknowledgement counter past what the caller saw;
--   - holds leasing and expiry for `grace_ms` (`recovering_until`) and
--     moves every lease's expiry to at least its end, so live holders
--     take back their leases before anything is leased again;
--   - logs `ledger_restarted` with what it found (acknowledgements lost,
--     the caller's sequence against the stored one).
-- A ledger another caller already confirmed on this server is left as it
-- is. Returns {epoch, acknowledgements lost (known_seq - stored seq, at
-- least 0), seq, 1 if this call recovered it else 0}, or NOTSEEDED.
local now, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
local known_seq, known_token, known_epoch = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('HGET', META, 'seeded') ~= '1' then return redis.error_reply('NOTSEEDED the ledger is not seeded') end
local stop = layout_guard() if stop then return stop end
local live = live_run()
local m = redis.call('HMGET', META, 'redis_run', 'epoch', 'seq', 'token')
local stored_epoch, stored_seq, stored_token = tonumber(m[2] or '1'), tonumber(m[3] or '0'), tonumber(m[4] or '0')
if m[1] == live then return { stored_epoch, 0, stored_seq, 0 } end
local epoch = math.max(stored_epoch, known_epoch) + 1
local lost = math.max(known_seq - stored_seq, 0)
local seq = math.max(stored_seq, known_seq)
local token = math.max(stored_token, known_token) + 4294967296
local until_ms = now + grace
redis.call('HSET', META, 'redis_run', live, 'epoch', epoch, 'seq', seq, 'token', token,
  'token_floor', token + 1, 'recovering_until', until_ms)
local leases = redis.call('ZRANGEBYSCORE', P .. 'leases', '-inf', '(' .. until_ms)
runs_read(leases)
for _, id in ipairs(leases) do
  redis.call('ZADD', P .. 'leases', until_ms, id)
  local r = run_of(id)
  if r then run_changed(id, r).expires = int(until_ms) end
end
local found = 'no acknowledged report lost that this coordinator saw'
if lost > 0 then
  found = 'acknowledged reports lost: ' .. lost .. ' (this coordinator saw sequence ' .. known_seq
    .. ', the server holds ' .. stored_seq .. ')'
end
event(now, 'ledger_restarted', '', 'redis server ' .. live .. ' (previously ' .. tostring(m[1] or 'unknown')
  .. '): epoch ' .. epoch .. '; ' .. found .. '; leasing held until ' .. until_ms
  .. ' while workers take back their leases and replay their journals')
return { epoch, lost, seq, 1 }
