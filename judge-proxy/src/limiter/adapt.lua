-- adapt.lua: what a provider said about its real quota, for every replica:
-- a cap on the rate fraction (from x-ratelimit-limit-* headers), a 429 on
-- a granted permit (counted in the success window, and a cut to just below
-- the rate the provider was measured to admit), a pause (Retry-After, or
-- remaining 0 until reset). Mirrors rate.rs `RateState` and
-- LocalLimiter::adapt (cap, then the 429, then pause).
--
-- KEYS: 1 upstream pause-until {P:jp:U}:pause   2 rate hash {P:jp:U}:rate
--   (cut, t, cap; the success window s<i>, n<i>, x<i>: see book.lua)
-- ARGV: 1 now (0: the server's TIME)   2 cut epoch (-1: no 429; else the
--   epoch the 429'd permit was booked in: no cut if a cut came since)
--   3 the 429'd permit's slot (µs)   4 the configured rpm (the measure's
--   unit)   5 pause (µs, 0: none)   6 cap (ppm, -1: keep)   7 hold (µs)
--   8 probe time scale (µs)   9 floor (ppm)   10 grace (µs)
--   11 sustain share (ppm)   12 fallback cut (ppm)   13 most a cut takes
--   (ppm of the rate in force left at least)   14 ring (s)   15 window (s)
-- Returns {ppm in force, cut epoch}.
--
-- Atomicity: one script, so a burst of 429s from one overshoot, seen by
-- several replicas at once, cuts once (the grace, measure and epoch checks
-- and the cut are one step), the window's counts are never lost between a read and
-- a write, and a shorter pause never overwrites a longer one.

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local epoch, slot, rpm = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local pause, new_cap = tonumber(ARGV[5]), tonumber(ARGV[6])
local hold, probe, floor, grace = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local sustain, fallback, maxcut = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local ring, window = tonumber(ARGV[14]), tonumber(ARGV[15])

local rate = redis.call('HMGET', KEYS[2], 'cut', 't', 'cap')
local cut = tonumber(rate[1] or '1000000')
local t_cut = tonumber(rate[2] or '0')
local cap = tonumber(rate[3] or '1000000')
-- rate.rs ppm_at: held, then the probe, capped and floored.
local function ppm_at()
  local since = now - t_cut - hold
  local rise = 0
  if since > 0 then
    local x = since / probe
    rise = math.floor(cut * x * x)
  end
  return math.max(math.min(cut + rise, cap), floor)
end
local changed = false
if new_cap >= 0 then
  -- A lower cap starts a new epoch at the cap (rate.rs RateState::set_cap).
  if new_cap < cap then
    cut = 1000000
    t_cut = now
  end
  cap = new_cap
  changed = true
end
if epoch >= 0 then
  -- The 429 comes out of its slot's second and marks it saturated
  -- (rate.rs SuccessWindow::limited).
  local sec = math.floor(slot / 1000000)
  local i = sec % ring
  local b = redis.call('HMGET', KEYS[2], 's' .. i, 'n' .. i, 'x' .. i)
  if tonumber(b[1] or '-1') == sec then
    redis.call('HSET', KEYS[2], 'n' .. i, string.format('%.0f', tonumber(b[2] or '0') - 1),
      'x' .. i, string.format('%.0f', tonumber(b[3] or '0') + 1))
  end
  -- rate.rs RateState::limited: no cut within the grace of the last one.
  if slot >= t_cut + grace then
    local current = ppm_at()
    -- rate.rs SuccessWindow::sustained_ppm: the mean admitted per
    -- saturated second of the last `window` complete seconds, the onset of
    -- an overshoot left out when another is there.
    local now_sec = math.floor(now / 1000000)
    local fields = {}
    for s = now_sec - window, now_sec - 1 do
      local j = s % ring
      fields[#fields + 1] = 's' .. j
      fields[#fields + 1] = 'n' .. j
      fields[#fields + 1] = 'x' .. j
    end
    local v = redis.call('HMGET', KEYS[2], unpack(fields))
    local sat = {}
    for k = 0, window - 1 do
      if tonumber(v[3 * k + 1] or '-1') == now_sec - window + k and tonumber(v[3 * k + 3] or '0') > 0 then
        sat[k] = math.max(tonumber(v[3 * k + 2] or '0'), 0)
      end
    end
    local all_n, all_s, set_n, set_s = 0, 0, 0, 0
    for k = 0, window - 1 do
      if sat[k] then
        all_n, all_s = all_n + sat[k], all_s + 1
        if k > 0 and sat[k - 1] then set_n, set_s = set_n + sat[k], set_s + 1 end
      end
    end
    if set_s > 0 then all_n, all_s = set_n, set_s end
    local target = current
    if all_s > 0 then
      local sustained = math.floor(all_n * 60000000 / (all_s * rpm))
      target = math.min(current, math.floor(sustained * sustain / 1000000))
    elseif t_cut <= epoch then
      -- Nothing measured: only a permit booked since the last cut cuts.
      target = math.floor(current * fallback / 1000000)
    end
    target = math.max(target, math.floor(current * maxcut / 1000000), floor)
    if target < current then
      cut = target
      t_cut = now
      changed = true
    end
  end
end
if changed then
  redis.call('HSET', KEYS[2], 'cut', string.format('%.0f', cut), 't', string.format('%.0f', t_cut),
    'cap', string.format('%.0f', cap))
  -- Idle for ten minutes, the rate has long recovered: let it go.
  redis.call('PEXPIRE', KEYS[2], 600000)
end
if pause > 0 then
  local until_ = now + pause
  local current = tonumber(redis.call('GET', KEYS[1]) or '0')
  if until_ > current then
    -- Kept ten minutes past its end: bookings read it as an empty bucket
    -- at the pause's end (book.lua), for up to one tolerance after it.
    redis.call('SET', KEYS[1], string.format('%.0f', until_), 'PX', math.ceil(pause / 1000) + 600000)
  end
end
return {ppm_at(), t_cut}
