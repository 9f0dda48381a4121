-- report_attempt: records a failed attempt of a leased run and applies the
-- retry policy. KEYS[1] meta. ARGV: now_ms, run_id, token, worker,
-- attempt JSON. Atomic: the attempt, its class count, the lease end and the
-- retry or final outcome change together.
-- Returns {0} stale, {1, not_before_ms} retry, {2, outcome} final.
local now, id, token, worker = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local attempt = cjson.decode(ARGV[5])
if not is_current(id, token) then
  discard(id, tonumber(token), worker, 'attempt', now, attempt['class'], nil)
  return { 0 }
end
local n = tonumber(redis.call('HGET', P .. 'run:' .. id, 'attempts'))
record_attempt(id, ARGV[5], worker, n, tonumber(token))
local kind, value = after_failure(id, arm_of(id), attempt['class'], attempt['detail'], now)
if kind == 'retry' then return { 1, value } end
return { 2, value }
