-- finish: records the final result of a leased run.
-- KEYS[1] meta. ARGV: now_ms, run_id, token, worker, outcome, reason,
-- record_sha256, observed_version ('' = not disclosed), has_version (0/1),
-- attempt JSON. Atomic: attempt, outcome, counts and lease end together.
-- Returns 1 when accepted, 0 when the lease was stale (kept as discarded).
local now, id, token, worker = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local outcome, reason, record, version, has_version = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
if not is_current(id, token) then
  discard(id, tonumber(token), worker, 'result', now, nil, outcome)
  return 0
end
local key = P .. 'run:' .. id
local n = tonumber(redis.call('HGET', key, 'attempts'))
record_attempt(id, ARGV[10], worker, n, tonumber(token))
local arm = arm_of(id)
end_lease(id, arm)
redis.call('HSET', key, 'record', record)
if has_version == '1' then redis.call('HSET', key, 'version', version) end
finalize(id, arm, outcome, reason, now)
return 1
