-- release: gives a lease back unfinished (worker drain). The run returns
-- to its place in the queue and the attempt is not counted.
-- KEYS[1] meta. ARGV: now_ms, run_id, token, worker. Atomic.
-- Returns 1 when released, 0 when the lease was stale.
local now, id, token, worker = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local stop = guard() if stop then return stop end
if not (is_current(id, token) or reclaim(id, token, worker, now, 0)) then
  discard(id, tonumber(token), worker, 'release', now, nil, nil)
  return 0
end
local arm = arm_of(id)
end_lease(id, arm)
local r = run_changed(id, run_of(id))
local attempts = tonumber(r.attempts) - 1
r.attempts = int(attempts)
local counted = attempts - tonumber(r.excused or '0')
if counted == 0 then r.started = '0' end
local closed = closed_reason(arm, now, id)
if closed then
  local outcome = 'not_run'
  if counted > 0 then outcome = 'unavailable' end
  finalize(id, arm, outcome, closed, now)
  return 1
end
requeue(id, arm, 0, now)
event(now, 'released', id, 'by ' .. worker)
return 1
