-- adapt.lua: what a provider said about its real quota, for every replica:
-- a cap on the rate fraction (from x-ratelimit-limit-* headers), a
-- multiplicative cut (a 429 on a granted permit), a pause (Retry-After, or
-- remaining 0 until reset). Mirrors gcra.rs `RateState` and
-- LocalLimiter::adapt (cap, then cut, then pause).
--
-- KEYS: 1 upstream pause-until {P:jp:U}:pause   2 rate hash {P:jp:U}:rate
-- ARGV: 1 now (0: the server's TIME)   2 cut epoch (-1: no cut; else the
--   epoch the 429'd permit was booked in: no cut if a cut came since)
--   3 pause (µs, 0: none)   4 cap (ppm, -1: keep)   5 recovery (ppm/s)
--   6 floor (ppm)   7 cut factor (ppm)
-- Returns {ppm in force, cut epoch}.
--
-- Atomicity: one script, so a burst of 429s from one overshoot, seen by
-- several replicas at once, cuts once (the epoch check and the cut are one
-- step), and a shorter pause never overwrites a longer one.

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local epoch, pause, new_cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local recover, floor, factor = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])

local rate = redis.call('HMGET', KEYS[2], 'cut', 't', 'cap')
local cut = tonumber(rate[1] or '1000000')
local t_cut = tonumber(rate[2] or '0')
local cap = tonumber(rate[3] or '1000000')
local function ppm_at()
  local rise = math.floor(math.max(now - t_cut, 0) * recover / 1000000)
  return math.max(math.min(cut + rise, cap), floor)
end
local changed = false
if new_cap >= 0 then
  -- A lower cap starts a new epoch at the cap (gcra.rs RateState::set_cap).
  if new_cap < cap then
    cut = 1000000
    t_cut = now
  end
  cap = new_cap
  changed = true
end
if epoch >= 0 and t_cut <= epoch then
  cut = math.max(math.floor(ppm_at() * factor / 1000000), floor)
  t_cut = now
  changed = true
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
