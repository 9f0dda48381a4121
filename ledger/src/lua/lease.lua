-- lease: hands runs to one worker or to several, in planned order: the
-- first worker up to its max, then the next (what calls made one after the
-- other would grant; the Redis ledger gathers the leases asked at once
-- into one call, ledger/src/coalesce.rs).
-- KEYS[1] meta. ARGV: now_ms, close_limit, scope ('auto': every arm
-- without ARM|manual; 'manual': only arm ARGV[4], which must be manual),
-- arm, then per worker: worker, max, ttl_ms.
-- Arms paused, at their cap, or held by a Retry-After (ARM|hold > now)
-- grant nothing. Atomic: the window check, the move of due retries, the grants, the
-- tokens and the arm slot counts happen in one script.
-- While the ledger recovers from a restart (`recovering_until`), nothing is
-- granted: the holders of leases the restart lost take them back first.
-- Returns {closed, done, n, run_id, token, attempt, question_text, expires, ...}
-- (the grants in order: the first worker's max of them, then the next's),
-- or an error UNKNOWNARM / NOTMANUAL for a manual scope naming a bad arm,
-- or RESTARTED (common.lua `guard`).
local now, close_limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local scope, scope_arm = ARGV[3], ARGV[4]
local workers, maxes, ttls = {}, {}, {}
local max = 0
for i = 5, #ARGV, 3 do
  local k = #workers + 1
  workers[k], maxes[k], ttls[k] = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  max = max + maxes[k]
end
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

-- Whether this call may grant runs of an arm that is (or is not) manual.
local function in_scope(arm, manual)
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
runs_read(due)
for _, id in ipairs(due) do
  redis.call('ZREM', P .. 'delayed', id)
  redis.call('ZADD', P .. 'pending:' .. arm_of(id), run_of(id).pos, id)
end

-- The arms that may grant, with their room.
local eligible = {}
local arms = cjson.decode(redis.call('HGET', P .. 'arms', 'order'))
-- Every arm's cap, leased count, hold, manual and paused fields, in one HMGET.
local FIELDS = { '|cap', '|leased', '|hold', '|manual', '|paused' }
local wanted_fields = {}
for _, arm in ipairs(arms) do
  for _, f in ipairs(FIELDS) do wanted_fields[#wanted_fields + 1] = arm .. f end
end
local held = redis.call('HMGET', P .. 'arms', unpack(wanted_fields))
for k, arm in ipairs(arms) do
  local at = (k - 1) * #FIELDS
  local hold = tonumber(held[at + 3] or '0')
  if in_scope(arm, held[at + 4] ~= false) and hold <= now and not held[at + 5] then
    local room = math.min(tonumber(held[at + 1]) - tonumber(held[at + 2] or 0), max)
    if room > 0 then table.insert(eligible, { arm = arm, room = room }) end
  end
end
-- Their queues, merged by position as they are read: each is read a few
-- entries more at a time than its even share of the batch (the planned
-- order interleaves the arms).
local queues = {}
for _, e in ipairs(eligible) do
  table.insert(queues, queue(e.arm, e.room, math.min(e.room, math.ceil(max / #eligible) + 2)))
end
-- The merge keeps each queue's next position in a plain array (false
-- once it has none): a grant reads one queue's head, not every queue's.
-- The candidates are parallel arrays (id, position as written, fresh,
-- arm), not a table each.
local cand_id, cand_pos, cand_fresh, cand_arm = {}, {}, {}, {}
local heads = {}
for k, q in ipairs(queues) do heads[k] = q:head() or false end
local n = 0
while n < max do
  local best, best_pos
  for k = 1, #queues do
    local pos = heads[k]
    if pos and (not best_pos or pos < best_pos) then best, best_pos = k, pos end
  end
  if not best then break end
  local q = queues[best]
  n = n + 1
  cand_id[n], cand_pos[n], cand_fresh[n] = q:take()
  cand_arm[n] = q.arm
  heads[best] = q:head() or false
end

-- The states of the runs that have one (not from a fresh list: common.lua,
-- the layout), read in one HMGET.
local changed = {}
for k = 1, n do
  if not cand_fresh[k] then changed[#changed + 1] = cand_id[k] end
end
runs_read(changed)

local out = { 0, 0, 0 }
-- The grants' tokens are the next n of the fencing counter, in order.
local first_token = 0
if n > 0 then first_token = redis.call('HINCRBY', META, 'token', n) - n + 1 end
local t = tally()
-- The lease set's new members (expires, run_id, ...), and each question's
-- text, read in one HMGET for the batch.
local leases, texts, wanted = {}, {}, {}
-- Each arm's grants, counted here and moved once an arm.
local leased = {}
-- Numbers written as strings once: a Lua number given to a command is
-- formatted as a float (`%.14g`), which costs more than the command.
local now_s = ARGV[1]
-- The worker the grant goes to: `seg`, with `left` grants to go.
local seg, left = 0, 0
local worker, expires, expires_s
for k = 1, n do
  while left == 0 do
    seg = seg + 1
    left = maxes[seg]
    worker, expires = workers[seg], now + ttls[seg]
    expires_s = string.format('%d', expires)
  end
  left = left - 1
  local id, arm = cand_id[k], cand_arm[k]
  local token = string.format('%d', first_token + k - 1)
  local attempts
  local q = q_of(id)
  -- A run in its fresh list never changed, so it has no state to read.
  local r = not cand_fresh[k] and run_of(id)
  if r then
    attempts = tonumber(r.attempts) + 1
    -- The first counted attempt starts the run (excused ones do not count).
    if attempts - tonumber(r.excused or '0') == 1 then r.started = now_s end
    r.attempts, r.state, r.token, r.worker, r.expires = int(attempts), 'leased', token, worker, expires_s
    run_changed(id, r)
  else
    -- No state (a fresh run, or one put back without ever changing in a
    -- ledger seeded before fresh lists): it is created now, as
    -- `create_run` would, and leased at once (its first attempt starts it).
    attempts = 1
    run_changed(id, { pos = cand_pos[k], state = 'leased', attempts = '1', token = token, worker = worker,
      expires = expires_s, started = now_s, log = '' })
  end
  leases[2 * k - 1] = expires_s
  leases[2 * k] = id
  leased[arm] = (leased[arm] or 0) + 1
  if not wanted[q] then
    wanted[q] = true
    texts[#texts + 1] = q
  end
  local o = 5 * k - 1
  out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, first_token + k - 1, attempts, q, expires
end
for arm, count in pairs(leased) do t:add(P .. 'arms', arm .. '|leased', count) end
if n > 0 then
  call_spread({ 'ZADD', P .. 'leases' }, leases)
  local found = call_spread({ 'HMGET', P .. 'questions' }, texts)
  local text_of = {}
  for i, q in ipairs(texts) do text_of[q] = found[i] or '' end
  for i = 7, #out, 5 do out[i] = text_of[out[i]] end
end
t:flush()
-- What each queue gave leaves it: a prefix of its fresh list, and members
-- of its pending zset.
for _, q in ipairs(queues) do
  if q.fresh_taken > 0 then redis.call('LTRIM', P .. 'fresh:' .. q.arm, q.fresh_taken, -1) end
  if #q.from_pending > 0 then call_spread({ 'ZREM', P .. 'pending:' .. q.arm }, q.from_pending) end
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
