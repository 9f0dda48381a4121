-- finish: records the final result of one leased run, or of several.
-- KEYS[1] meta. ARGV: now_ms, worker, then groups of 8: run_id, token,
-- outcome, reason, record_sha256, observed_version ('' = not disclosed),
-- has_version (0/1), attempt JSON. Atomic over the whole call: each
-- result's attempt, outcome, counts and lease end change together. The
-- attempt JSON's `attempt` field is the lease's number as the worker's run
-- record has it (0: the worker does not say): a lease taken back after a
-- rollback is recorded at that number (common.lua `reclaim`).
-- Returns one integer per result: 1 accepted, 0 stale (kept as discarded),
-- then the acknowledgement's sequence number (the counter moves by one per
-- result: the last result's number). A result the run already has
-- (same token, record and outcome: a report sent again, or replayed from a
-- worker's journal) is accepted and changes nothing. A lease the ledger
-- lost in a rollback is taken back first (common.lua `reclaim`).
-- A result whose outcome does not fit its attempt's class (FITS, from
-- lifecycle::check_final) refuses the whole call before anything changes:
-- error `UNFIT run_id outcome class`.
local now, worker = tonumber(ARGV[1]), ARGV[2]
local stop = guard() if stop then return stop end
for i = 3, #ARGV, 8 do
  local outcome, class = ARGV[i + 2], cjson.decode(ARGV[i + 7])['class']
  if not (FITS[outcome] and FITS[outcome][class]) then
    return redis.error_reply('UNFIT ' .. ARGV[i] .. ' ' .. outcome .. ' ' .. tostring(class))
  end
end
local out = {}
for i = 3, #ARGV, 8 do
  local id, token, outcome, reason = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local record, version, has_version, attempt = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  local key = P .. 'run:' .. id
  local held = redis.call('HMGET', key, 'state', 'token', 'record', 'outcome')
  local number = tonumber(cjson.decode(attempt)['attempt']) or 0
  if held[1] == 'final' and held[2] == token and held[3] == record and held[4] == outcome then
    table.insert(out, 1)
  elseif not (is_current(id, token) or reclaim(id, token, worker, now, 0, number)) then
    discard(id, tonumber(token), worker, 'result', now, nil, outcome)
    table.insert(out, 0)
  else
    record_attempt(id, attempt, worker, attempt_number(id, number), tonumber(token))
    local arm = arm_of(id)
    end_lease(id, arm)
    redis.call('HSET', key, 'record', record)
    if has_version == '1' then redis.call('HSET', key, 'version', version) end
    finalize(id, arm, outcome, reason, now)
    table.insert(out, 1)
  end
end
table.insert(out, bump_seq(#out))
return out
