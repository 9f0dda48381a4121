-- restore: writes runs of a ledger being rebuilt (`RedisLedger::rebuild`),
-- after its plan and before it is seeded: each run left out of the queues
-- by the plan's writing is given its state and its attempts.
-- KEYS[1] meta. ARGV: now_ms, manifest_sha256, then groups of 8: run_id,
-- position, outcome ('' = pending, its attempts counted), reason,
-- record_sha256, observed_version, has_version (0/1), attempts (JSON array
-- of attempt records, numbered). Atomic per call. A run restored before (a
-- rebuild done again, after the plan's writing reset the counts, the
-- queues and `finished`) is written again from scratch. Refuses a ledger that
-- is seeded (`NOTEMPTY`) or being written for another manifest.
-- Returns the number of runs written.
local now, manifest = tonumber(ARGV[1]), ARGV[2]
local m = redis.call('HMGET', META, 'seeded', 'manifest_sha256', 'cohort')
if m[1] == '1' then return redis.error_reply('NOTEMPTY ' .. tostring(m[3])) end
if m[2] ~= manifest then return redis.error_reply('ERR the plan being rebuilt is of another manifest') end
local n = 0
for i = 3, #ARGV, 8 do
  local id, pos, outcome, reason = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local record, version, has_version, attempts = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], cjson.decode(ARGV[i + 7])
  local arm = arm_of(id)
  -- Written again from scratch: the plan's writing reset the counts.
  redis.call('ZREM', P .. 'pending:' .. arm, id)
  local r = create_run(id, pos)
  local number, excused, started, ended = 0, 0, 0, now
  for k, a in ipairs(attempts) do
    local json = cjson.encode(a)
    record_attempt(id, json, a['worker'] or '', a['attempt'], a['token'] or 0)
    number = math.max(number, tonumber(a['attempt']) or 0, k)
    if EXCUSED[a['class']] then excused = excused + 1 end
    if k == 1 then started = a['started_ms'] end
    ended = a['ended_ms']
  end
  r.attempts, r.excused, r.started = int(number), int(excused), int(started)
  -- The last lease's token and holder, where the evidence names them: a
  -- journal's replay of its report is then the same report again.
  local last = attempts[#attempts]
  if last and tonumber(last['token'] or 0) > 0 then
    r.token, r.worker = int(last['token']), present(last['worker'] or '')
  end
  if outcome ~= '' then
    r.record = record
    if has_version == '1' then r.version = version end
    finalize(id, arm, outcome, reason, now)
    r.ended = int(ended)
  else
    requeue(id, arm, 0, now)
  end
  n = n + 1
end
return n
