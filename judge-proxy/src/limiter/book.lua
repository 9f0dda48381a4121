-- book.lua: book the earliest slot for one request of one team at one
-- upstream, or refuse it without a change. The same rule as
-- judge-proxy/src/limiter/gcra.rs `book` (applied after `adjust` for each
-- correction); keep the two in step (test: local_and_redis_decide_alike).
--
-- KEYS (all share one hash tag, so the script also runs on Redis Cluster):
--   1 upstream pause-until   {P:jp:U}:pause
--   2 upstream rate (hash: cut, t, cap, and the success window s<i>, n<i>,
--     x<i>)   {P:jp:U}:rate
--   then for each team j = 0..n-1 of the upstream, in config order:
--   3+2j request TAT {P:jp:U}:team:T:rpm   4+2j token TAT {P:jp:U}:team:T:tpm
-- Values are microseconds since the Unix epoch, as decimal integers.
--
-- ARGV (integers; increments computed by the caller at the configured
-- rate, scaled here by the effective rate):
--   1 now (0: use the Redis server's TIME, the one clock all replicas share)
--   2 team index (0-based)   3 max wait (µs)   4 tolerance (µs)
--   5 borrow horizon (µs)    6 hold (µs)   7 probe time scale (µs)
--   8 floor (ppm)   9 ring (seconds)   10 window (seconds)
--   11 n (teams)   12..11+n request increments   12+n..11+2n token
--   increments   12+2n m (corrections), then m triples (timeline index,
--   request µs, token µs): give-backs and token reconciliations of this
--   replica, applied before the booking (so they cost no call of their own).
-- The rate (rate.rs `ppm_at`): held `hold` after the last cut, then
-- `cut * (t / probe)^2` more, capped and floored. A booking counts in its
-- slot's second of the success window (rate.rs `SuccessWindow::booked`):
-- fields s<i> (the second), n<i> (admitted), x<i> (429s) of the rate hash,
-- i = second mod ring.
--
-- Returns {booked (0|1), slot, timeline, request inc, token inc, ppm,
-- cut epoch, now}.
--
-- Atomicity: Redis runs a script alone, so the read-choose-write over every
-- timeline of the upstream is one step for every replica: bookings are
-- serialised, which is what makes the order first-come across replicas.
-- TIME inside a script is allowed since Redis 5 (effects replication, the
-- only mode of Redis 7).

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local team, max_wait = tonumber(ARGV[2]), tonumber(ARGV[3])
local tol0, horizon0 = tonumber(ARGV[4]), tonumber(ARGV[5])
local hold, probe, floor = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local ring, window = tonumber(ARGV[9]), tonumber(ARGV[10])
local n = tonumber(ARGV[11])

local function num(v)
  if v then return tonumber(v) end
  return nil
end

local function store(key, value)
  -- Keep a key as long as it can matter, plus a minute of slack.
  local ttl = math.max(math.ceil((value - now) / 1000), 0) + 60000
  redis.call('SET', key, string.format('%.0f', value), 'PX', ttl)
end

local req, tok = {}, {}
for j = 0, n - 1 do
  req[j] = num(redis.call('GET', KEYS[3 + 2 * j])) or 0
  tok[j] = num(redis.call('GET', KEYS[4 + 2 * j])) or 0
end

-- Corrections: positive charges from now, negative gives back (never
-- below now).
local function shift(tat, d)
  if d > 0 then return math.max(tat, now) + d end
  return math.max(tat + d, now)
end
local m = tonumber(ARGV[12 + 2 * n])
for k = 0, m - 1 do
  local at = 13 + 2 * n + 3 * k
  local j, dr, dt = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  if dr ~= 0 then
    req[j] = shift(req[j], dr)
    store(KEYS[3 + 2 * j], req[j])
  end
  if dt ~= 0 then
    tok[j] = shift(tok[j], dt)
    store(KEYS[4 + 2 * j], tok[j])
  end
end

local rate = redis.call('HMGET', KEYS[2], 'cut', 't', 'cap')
local cut, t_cut, cap = num(rate[1]) or 1000000, num(rate[2]) or 0, num(rate[3]) or 1000000
local since = now - t_cut - hold
local rise = 0
if since > 0 then
  local x = since / probe
  rise = math.floor(cut * x * x)
end
local ppm = math.max(math.min(cut + rise, cap), floor)

local function scale(x) return math.ceil(x * 1000000 / ppm) end

local tol, horizon = scale(tol0), scale(horizon0)

-- After a pause the provider's bucket is empty: no burst (gcra.rs).
local paused = num(redis.call('GET', KEYS[1])) or 0
local base = math.max(now, paused)
local req_floor = 0
if paused > 0 then req_floor = paused + tol end

local best_s, best_j, best_ri, best_ti = nil, nil, nil, nil
local function consider(j)
  local ri, ti = scale(tonumber(ARGV[12 + j])), scale(tonumber(ARGV[12 + n + j]))
  local r = math.max(req[j], req_floor)
  local s = math.max(base, math.max(r, base) + ri - tol, tok[j] - tol)
  -- A borrowed booking leaves the owner at most one of its own intervals
  -- behind in tokens (gcra.rs).
  if j ~= team and (s > base + horizon or math.max(tok[j], s) + ti - tol > base + ri) then return end
  if best_s == nil or s < best_s then
    best_s, best_j, best_ri, best_ti = s, j, ri, ti
  end
end
consider(team)
for j = 0, n - 1 do
  if j ~= team then consider(j) end
end

if best_s - now > max_wait then
  return {0, best_s, best_j, best_ri, best_ti, ppm, t_cut, now}
end
local j = best_j
store(KEYS[3 + 2 * j], math.max(req[j], req_floor, base, best_s - math.max(best_ri - tol, 0)) + best_ri)
store(KEYS[4 + 2 * j], math.max(tok[j], best_s) + best_ti)
local sec = math.floor(best_s / 1000000)
if sec - math.floor(now / 1000000) < ring - window - 1 then
  local i = sec % ring
  -- HMGET and HSET only: the commands a script runs are the ones the
  -- tests' Redis call counts leave out (judge_proxy_shared_limits).
  local b = redis.call('HMGET', KEYS[2], 's' .. i, 'n' .. i)
  if tonumber(b[1] or '-1') == sec then
    redis.call('HSET', KEYS[2], 'n' .. i, string.format('%.0f', tonumber(b[2] or '0') + 1))
  else
    redis.call('HSET', KEYS[2], 's' .. i, string.format('%.0f', sec), 'n' .. i, 1, 'x' .. i, 0)
    -- The rate hash lives while bookings come, and ten minutes after.
    redis.call('PEXPIRE', KEYS[2], 600000)
  end
end
return {1, best_s, j, best_ri, best_ti, ppm, t_cut, now}
