-- report_attempt: records a failed attempt of a leased run and applies the
-- retry policy. KEYS[1] meta. ARGV: now_ms, run_id, token, worker,
-- attempt JSON (its `attempt` field: the lease's number as the worker's run
-- record has it, 0 when the worker does not say). Atomic: the attempt, its
-- class count, the lease end and the retry or final outcome change
-- together.
-- Returns {0, ''} stale, {1, not_before_ms} retry, {2, outcome} final,
-- {3, reason} back in the queue with the arm paused (auth_error), each
-- followed by the acknowledgement's sequence number.
-- Idempotent, keyed by the lease: the same attempt again (a recorded
-- attempt of the run, the last or an earlier one, has its token, class,
-- start and end: a report sent again or replayed from a worker's journal)
-- is acknowledged without change: {2, outcome} if the run is final, else
-- {1, 0}. A lease the ledger lost in a rollback is taken back first
-- (common.lua `reclaim`), at the reported number. An acknowledged attempt
-- the rollback lost, replayed after its run moved on (another lease's
-- report came back first), is put back at its number without changing the
-- run (`restore_lost`); only a report of a token issued before the last
-- recovery can be one.
local now, id, token, worker = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local attempt = cjson.decode(ARGV[5])
local number = tonumber(attempt['attempt']) or 0
local stop = guard() if stop then return stop end
local list = attempts_of(run_of(id))

-- The answer to a report the ledger already holds: the run's state.
local function again()
  local r = run_of(id)
  if r and r.state == 'final' then return { 2, r.outcome, bump_seq() } end
  return { 1, 0, bump_seq() }
end

for _, raw in ipairs(list) do
  local l = cjson.decode(raw)
  if tostring(l['token']) == token and l['class'] == attempt['class'] and l['started_ms'] == attempt['started_ms']
    and l['ended_ms'] == attempt['ended_ms'] then
    return again()
  end
end

-- Puts back an acknowledged attempt (number `number` under `token`) that a
-- rollback lost while the run went on without it: in place of the
-- `worker_lost` a reclaim recorded for its lease, or at its number among
-- the run's attempts when none has it. Returns whether it did; a lease
-- whose end the ledger recorded itself (expired) or a number another lease
-- holds is a stale report.
local function restore_lost()
  local t = tonumber(token)
  if number < 1 or not t or t >= tonumber(redis.call('HGET', META, 'token_floor') or '0') then return false end
  local r = run_of(id)
  if not r then return false end
  attempt['worker'] = worker
  attempt['token'] = t
  attempt['attempt'] = number
  for i, raw in ipairs(list) do
    local l = cjson.decode(raw)
    if tonumber(l['token']) == t then
      if l['reclaimed_by'] == nil or tonumber(l['attempt']) ~= number then return false end
      list[i] = cjson.encode(attempt)
      r.log = table.concat(list, '\n')
      run_changed(id, r)
      redis.call('HINCRBY', COUNTS, 'c|' .. l['class'], -1)
      redis.call('HINCRBY', COUNTS, 'c|' .. attempt['class'], 1)
      return true
    end
    if tonumber(l['attempt']) == number then return false end
  end
  local encoded, kept, placed = cjson.encode(attempt), {}, false
  for _, raw in ipairs(list) do
    if not placed and tonumber(cjson.decode(raw)['attempt']) > number then
      table.insert(kept, encoded)
      placed = true
    end
    table.insert(kept, raw)
  end
  if not placed then table.insert(kept, encoded) end
  r.log = table.concat(kept, '\n')
  redis.call('HINCRBY', COUNTS, 'c|' .. attempt['class'], 1)
  if number > tonumber(r.attempts or '0') then r.attempts = int(number) end
  run_changed(id, r)
  return true
end

if not (is_current(id, token) or reclaim(id, token, worker, now, 0, number)) then
  if restore_lost() then
    event(now, 'restored', id, 'attempt ' .. number .. ' (' .. attempt['class'] .. ') under token ' .. token
      .. ' from ' .. worker .. ': acknowledged before a rollback lost it')
    return again()
  end
  discard(id, tonumber(token), worker, 'attempt', now, attempt['class'], nil)
  return { 0, '', bump_seq() }
end
local n = attempt_number(id, number)
record_attempt(id, ARGV[5], worker, n, tonumber(token))
-- JSON null decodes to cjson.null, not nil: only a number is a Retry-After.
local retry_after = attempt['retry_after_ms']
if type(retry_after) ~= 'number' then retry_after = 0 end
local status = attempt['http_status']
if type(status) ~= 'number' then status = 0 end
local detail = attempt['detail']
if type(detail) ~= 'string' then detail = '' end
local kind, value = after_failure(id, arm_of(id), attempt['class'], detail, now, status, retry_after)
local seq = bump_seq()
if kind == 'retry' then return { 1, value, seq } end
if kind == 'pause' then return { 3, value, seq } end
return { 2, value, seq }
