-- report_attempt: records a failed attempt of a leased run and applies the
-- retry policy. KEYS[1] meta. ARGV: now_ms, run_id, token, worker,
-- attempt JSON. Atomic: the attempt, its class count, the lease end and the
-- retry or final outcome change together.
-- Returns {0} stale, {1, not_before_ms} retry, {2, outcome} final,
-- {3, reason} back in the queue with the arm paused (auth_error).
local now, id, token, worker = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local attempt = cjson.decode(ARGV[5])
if not is_current(id, token) then
  discard(id, tonumber(token), worker, 'attempt', now, attempt['class'], nil)
  return { 0 }
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
if kind == 'retry' then return { 1, value } end
if kind == 'pause' then return { 3, value } end
return { 2, value }
