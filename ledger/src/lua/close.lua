-- close: finalises pending runs when a round's or the cohort's window has
-- passed (mode 'window')
-- or the cohort is aborted (mode 'abort', ARGV[4] = reason, recorded once).
-- KEYS[1] meta. ARGV: now_ms, mode, limit, reason. Atomic per call; at most
-- `limit` runs per call (callers loop until 0). Returns how many it finalised.
local now, mode, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
if redis.call('HGET', META, 'seeded') ~= '1' then return redis.error_reply('NOTSEEDED the ledger is not seeded') end
local stop = guard() if stop then return stop end
if mode == 'abort' then
  if redis.call('HEXISTS', META, 'aborted') == 0 then
    redis.call('HSET', META, 'aborted', ARGV[4])
    event(now, 'aborted', '', ARGV[4])
  end
  return close_pending('aborted', nil, now, limit)
end
local rounds = close_rounds_if_due(now, limit)
if rounds > 0 then return rounds end
local _, n = close_window_if_due(now, limit)
return n
