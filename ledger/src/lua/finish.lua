-- finish: records the final result of one leased run, or of several, of
-- one worker or of several (the Redis ledger gathers the results reported
-- at once into one call, ledger/src/coalesce.rs; each worker's results are
-- recorded as calls made one after the other would record them).
-- KEYS[1] meta. ARGV: now_ms, then per worker: worker, the number of its
-- results, and a group of 10 a result: run_id, token,
-- outcome, reason, record_sha256, observed_version ('' = not disclosed),
-- has_version (0/1), the attempt's class, the attempt's number, and the
-- attempt's JSON with every field but `worker`, `attempt` and `token`,
-- which the ledger writes, and without its opening brace (common.lua
-- `push_attempt`; the class is sent apart as well, so nothing is decoded).
-- The number is the lease's, as the worker's
-- run record has it (0: the worker does not say): a lease taken back after
-- a rollback is recorded at that number (common.lua `reclaim`). Atomic over
-- the whole call: each result's attempt, outcome, counts and lease end
-- change together; the counts and the lease set are written once per call
-- (common.lua `tally`).
-- Returns one integer per result: 1 accepted, 0 stale (kept as discarded),
-- then the acknowledgement's sequence number (the counter moves by one per
-- result: the last result's number). A result the run already has
-- (same token, record and outcome: a report sent again, or replayed from a
-- worker's journal) is accepted and changes nothing. A lease the ledger
-- lost in a rollback is taken back first (common.lua `reclaim`).
-- A result whose outcome does not fit its attempt's class (FITS, from
-- lifecycle::check_final) refuses the whole call before anything changes:
-- error `UNFIT run_id outcome class`.
local GROUP = 10
local now = tonumber(ARGV[1])
local stop = guard() if stop then return stop end
-- Each worker's section: its name, the ARGV index of its first group and
-- of its last.
local section_worker, section_first, section_last = {}, {}, {}
local at = 2
while at <= #ARGV do
  local k = #section_worker + 1
  section_worker[k], section_first[k] = ARGV[at], at + 2
  at = at + 2 + GROUP * tonumber(ARGV[at + 1])
  section_last[k] = at - GROUP
end
for k = 1, #section_worker do
  for i = section_first[k], section_last[k], GROUP do
    local outcome, class = ARGV[i + 2], ARGV[i + 7]
    if not (FITS[outcome] and FITS[outcome][class]) then
      return redis.error_reply('UNFIT ' .. ARGV[i] .. ' ' .. outcome .. ' ' .. tostring(class))
    end
  end
end
local out, n_out = {}, 0
local t = tally()
-- Runs whose lease ends: out of the lease set in one ZREM at the end,
-- and their arms' leased counts moved once an arm.
-- (The lists are filled through counts: common.lua, RUN_CHANGED_N.)
local ended, n_ended, ended_by_arm = {}, 0, {}
-- Every result's run state, read in one HMGET.
local ids, n_ids = {}, 0
for k = 1, #section_worker do
  for i = section_first[k], section_last[k], GROUP do
    n_ids = n_ids + 1
    ids[n_ids] = ARGV[i]
  end
end
runs_read(ids)
for k = 1, #section_worker do
  local worker = section_worker[k]
  local head = attempt_head(worker)
  for i = section_first[k], section_last[k], GROUP do
    local id, token, outcome, reason = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local record, version, has_version = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
    local class, number_s, tail = ARGV[i + 7], ARGV[i + 8], ARGV[i + 9]
    local number = tonumber(number_s) or 0
    local r = run_of(id)
    if r and r.state == 'final' and r.token == token and r.record == record and r.outcome == outcome then
      n_out = n_out + 1
      out[n_out] = 1
    else
      local current = r and r.state == 'leased' and r.token == token
      if not current and reclaim(id, token, worker, now, 0, number) then
        current = true
        r = run_of(id)
      end
      if not current then
        discard(id, tonumber(token), worker, 'result', now, nil, outcome)
        n_out = n_out + 1
        out[n_out] = 0
      else
        -- The attempt's number: the worker's when past the run's count
        -- (common.lua `attempt_number`), which then moves to it; kept as the
        -- string the run's state or the worker wrote (a Lua number would be
        -- formatted again for the JSON).
        r.record = record
        local n = r.attempts or '0'
        if number > tonumber(n) then
          n = number_s
          r.attempts = n
        end
        if has_version == '1' then r.version = version end
        push_attempt(id, tail, class, head, n, token, t)
        local arm = arm_of(id)
        n_ended = n_ended + 1
        ended[n_ended] = id
        ended_by_arm[arm] = (ended_by_arm[arm] or 0) + 1
        -- `now` as ARGV has it: a string, written without formatting.
        finalize(id, arm, outcome, reason, ARGV[1], t)
        n_out = n_out + 1
        out[n_out] = 1
      end
    end
  end
end
for arm, count in pairs(ended_by_arm) do t:add(P .. 'arms', arm .. '|leased', -count) end
if n_ended > 0 then call_spread({ 'ZREM', P .. 'leases' }, ended) end
t:flush()
out[n_out + 1] = bump_seq(n_out)
return out
