-- lease: hands up to ARGV[2] runs to worker ARGV[4], in planned order.
-- KEYS[1] meta. ARGV: now_ms, max, ttl_ms, worker, close_limit, scope
-- ('auto': every arm without ARM|manual; 'manual': only arm ARGV[7], which
-- must be manual), arm.
-- Arms paused, at their cap, or held by a Retry-After (ARM|hold > now)
-- grant nothing. Atomic: the window check, the move of due retries, the grants, the
-- tokens and the arm slot counts happen in one script.
-- While the ledger recovers from a restart (`recovering_until`), nothing is
-- granted: the holders of leases the restart lost take them back first.
-- Returns {closed, done, n, run_id, token, attempt, question_text, expires, ...},
-- or an error UNKNOWNARM / NOTMANUAL for a manual scope naming a bad arm,
-- or RESTARTED (common.lua `guard`).
local now, max, ttl, worker = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local close_limit = tonumber(ARGV[5])
local scope, scope_arm = ARGV[6], ARGV[7]
if redis.call('HGET', META, 'seeded') ~= '1' then return redis.error_reply('NOTSEEDED the ledger is not seeded') end
local stop = guard() if stop then return stop end
if scope == 'manual' then
  if redis.call('HEXISTS', P .. 'arms', scope_arm .. '|cap') == 0 then
    return redis.error_reply('UNKNOWNARM ' .. scope_arm)
  end
  if redis.call('HEXISTS', P .. 'arms', scope_arm .. '|manual') == 0 then
    return redis.error_reply('NOTMANUAL ' .. scope_arm)
  end
end

-- Whether this call may grant runs of `arm`.
local function in_scope(arm)
  local manual = redis.call('HEXISTS', P .. 'arms', arm .. '|manual') == 1
  if scope == 'manual' then return arm == scope_arm end
  return not manual
end

local function finished_all()
  local m = redis.call('HMGET', META, 'planned', 'finished')
  return tonumber(m[1]) == tonumber(m[2] or 0)
end

local closed = close_window_if_due(now, close_limit)
if closed or redis.call('HEXISTS', META, 'aborted') == 1 then
  return { 1, finished_all() and 1 or 0, 0 }
end
if recovering(now) then return { 0, finished_all() and 1 or 0, 0 } end

-- Rounds whose own window passed are closed (up to close_limit runs; the
-- rest on later calls), and rounds that have opened join their queues.
close_rounds_if_due(now, close_limit)
release_rounds(now)

-- Retries whose backoff has elapsed go back to their arm's queue.
local due = redis.call('ZRANGEBYSCORE', P .. 'delayed', '-inf', now)
for _, id in ipairs(due) do
  redis.call('ZREM', P .. 'delayed', id)
  redis.call('ZADD', P .. 'pending:' .. arm_of(id), redis.call('HGET', P .. 'run:' .. id, 'pos'), id)
end

-- The head of each eligible arm's queue, merged by position.
local candidates = {}
local arms = cjson.decode(redis.call('HGET', P .. 'arms', 'order'))
for _, arm in ipairs(arms) do
  local hold = tonumber(redis.call('HGET', P .. 'arms', arm .. '|hold') or '0')
  if in_scope(arm) and hold <= now and redis.call('HEXISTS', P .. 'arms', arm .. '|paused') == 0 then
    local a = redis.call('HMGET', P .. 'arms', arm .. '|cap', arm .. '|leased')
    local room = math.min(tonumber(a[1]) - tonumber(a[2] or 0), max)
    if room > 0 then
      for _, c in ipairs(queue_head(arm, room)) do
        c.arm = arm
        table.insert(candidates, c)
      end
    end
  end
end
table.sort(candidates, function(x, y) return x.pos < y.pos end)

local out = { 0, 0, 0 }
local n = 0
-- Per arm, how many runs were taken from the head of its fresh list.
local fresh_taken = {}
for _, c in ipairs(candidates) do
  if n >= max then break end
  local key = P .. 'run:' .. c.id
  local token = redis.call('HINCRBY', META, 'token', 1)
  local expires = now + ttl
  local r = redis.call('HMGET', key, 'attempts', 'excused', 'q')
  local attempts, q
  if r[1] then
    attempts, q = tonumber(r[1]) + 1, r[3]
    redis.call('HSET', key, 'attempts', attempts, 'state', 'leased', 'token', token, 'worker', worker,
      'expires', expires)
    -- The first counted attempt starts the run (excused ones do not count).
    if attempts - tonumber(r[2] or '0') == 1 then redis.call('HSET', key, 'started', now) end
  else
    -- The run's first change: its hash is created now, as `create_run`
    -- would and leased at once (its first attempt starts it).
    local rep
    q, rep = string.match(c.id, '^([^:]+):[^:]+:(%d+)$')
    attempts = 1
    redis.call('HSET', key, 'pos', c.pos, 'arm', c.arm, 'q', q, 'rep', rep, 'state', 'leased',
      'attempts', 1, 'token', token, 'worker', worker, 'expires', expires, 'started', now)
  end
  if c.fresh then
    fresh_taken[c.arm] = (fresh_taken[c.arm] or 0) + 1
  else
    redis.call('ZREM', P .. 'pending:' .. c.arm, c.id)
  end
  redis.call('ZADD', P .. 'leases', expires, c.id)
  redis.call('HINCRBY', P .. 'arms', c.arm .. '|leased', 1)
  table.insert(out, c.id)
  table.insert(out, token)
  table.insert(out, attempts)
  table.insert(out, redis.call('HGET', P .. 'questions', q) or '')
  table.insert(out, expires)
  n = n + 1
end
-- The fresh runs granted are a prefix of each arm's list (`queue_head`).
for _, arm in ipairs(arms) do
  if fresh_taken[arm] then redis.call('LTRIM', P .. 'fresh:' .. arm, fresh_taken[arm], -1) end
end
-- The window opens at the first start: the first lease that grants a run.
-- With rounds, the cohort's window ends with its last round's.
if n > 0 and not redis.call('HGET', META, 'window_start') then
  local every, rounds, _, window_ms = round_params()
  local finish = now + (rounds - 1) * math.max(every, 0) + window_ms
  redis.call('HSET', META, 'window_start', now, 'window_end', finish)
  event(now, 'window_opened', '', 'closes at ' .. finish)
end
out[3] = n
out[2] = finished_all() and 1 or 0
return out
