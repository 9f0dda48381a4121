-- leases_held: the runs leased to worker ARGV[1] now, in planned order.
-- KEYS[1] meta. ARGV: worker. Read-only; one consistent snapshot.
-- Returns {run_id, token, attempt, question_text, expires, ...} (groups of 5).
local worker = ARGV[1]
if redis.call('HGET', META, 'seeded') ~= '1' then return redis.error_reply('NOTSEEDED the ledger is not seeded') end
local stop = layout_guard() if stop then return stop end
local held = {}
local leased = redis.call('ZRANGE', P .. 'leases', 0, -1)
runs_read(leased)
for _, id in ipairs(leased) do
  local r = run_of(id)
  if r and r.worker == worker and r.state == 'leased' then
    table.insert(held, { id = id, pos = tonumber(r.pos), token = tonumber(r.token), attempts = tonumber(r.attempts),
      q = q_of(id), expires = tonumber(r.expires) })
  end
end
table.sort(held, function(x, y) return x.pos < y.pos end)
local out = {}
for _, h in ipairs(held) do
  table.insert(out, h.id)
  table.insert(out, h.token)
  table.insert(out, h.attempts)
  table.insert(out, redis.call('HGET', P .. 'questions', h.q) or '')
  table.insert(out, h.expires)
end
return out
