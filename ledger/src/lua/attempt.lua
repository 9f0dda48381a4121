-- report_attempt: records a failed attempt of a leased run and applies the
-- retry policy. KEYS[1] meta. ARGV: now_ms, run_id, token, worker,
-- attempt JSON. Atomic: the attempt, its class count, the lease end and the
-- retry or final outcome change together.
-- Returns {0, ''} stale, {1, not_before_ms} retry, {2, outcome} final,
-- {3, reason} back in the queue with the arm paused (auth_error), each
-- followed by the acknowledgement's sequence number. The same attempt
-- again (its token, class, start and end are the run's last recorded
-- attempt: a report sent again or replayed from a worker's journal) is
-- acknowledged without change: {2, outcome} if the run is final, else
-- {1, 0}. A lease the ledger lost in a rollback is taken back first
-- (common.lua `reclaim`).
local now, id, token, worker = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local attempt = cjson.decode(ARGV[5])
local stop = guard() if stop then return stop end
local last = redis.call('LINDEX', P .. 'attempts:' .. id, -1)
if last then
  local l = cjson.decode(last)
  if tostring(l['token']) == token and l['class'] == attempt['class'] and l['started_ms'] == attempt['started_ms']
    and l['ended_ms'] == attempt['ended_ms'] then
    local r = redis.call('HMGET', P .. 'run:' .. id, 'state', 'outcome')
    if r[1] == 'final' then return { 2, r[2], bump_seq() } end
    return { 1, 0, bump_seq() }
  end
end
if not (is_current(id, token) or reclaim(id, token, worker, now, 0)) then
  discard(id, tonumber(token), worker, 'attempt', now, attempt['class'], nil)
  return { 0, '', bump_seq() }
end
local n = tonumber(redis.call('HGET', P .. 'run:' .. id, 'attempts'))
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
