-- Shared prelude of every ledger script (prepended by redis.rs, after the
-- lifecycle tables it generates).
--
-- KEYS[1] is always the cohort's meta hash, `cohort:{NAME}:meta`. Every
-- other key the scripts touch is derived from it and carries the same hash
-- tag `{NAME}`, so all of a cohort's keys live in one Redis Cluster slot and
-- each script runs atomically over them. Key layout (P = `cohort:{NAME}:`):
--   P.."meta"            hash: seeded, manifest_sha256, header (JSON),
--                        token (fencing counter), window_ms, retry policy,
--                        window_start, window_end, window_closed, aborted,
--                        planned, finished, discarded, rounds,
--                        round_every_ms, rounds_closed; and durability
--                        (ARCHITECTURE.md, "Durable acknowledgements"):
--                        redis_run (the server's run id the ledger last
--                        confirmed), epoch, seq (acknowledgement counter),
--                        token_floor (tokens below it were issued before
--                        the last recovery), recovering_until (ms);
--                        layout (LAYOUT: run states in `runs`; absent
--                        before `migrate.lua` moved a layout-1 ledger's,
--                        `migrated` the index of `order` it has reached)
--   P.."fresh:"..arm     list: 'POS|RUN_ID', the arm's runs that never
--                        changed, ready to lease, in planned order
--                        (ascending POS, the run's position); written at
--                        seeding (an RPUSH is far cheaper than a ZADD) and
--                        only ever taken from its head, except by `reclaim`
--                        (after a rollback) and the rounds sweep, which
--                        drain or remove. With rounds that wait it holds
--                        round 1's runs only. A ledger seeded before has
--                        none (an empty list): its runs are in `pending`.
--   P.."pending:"..arm   zset: run_id -> position, runs put back ready to
--                        lease (retries whose backoff elapsed, releases,
--                        excused requeues, opened rounds): few. An arm's
--                        queue is the merge of this and `fresh:ARM` by
--                        position (`queue`)
--   P.."delayed"         zset: run_id -> not_before_ms, retries in backoff
--   P.."rounds"          zset: run_id -> ROUND_SCALE * round + position,
--                        runs of rounds not open yet (a repeated-run cohort
--                        with round_every_ms > 0); a ledger seeded before
--                        scores the round alone and keeps the position in
--                        the run's state
--   P.."leases"          zset: run_id -> expires_ms, runs leased now
--   P.."runs"            hash: run_id -> the run's state, one packed
--                        value (`pack_run`): pos, state, attempts, excused
--                        (auth_error attempts, not counted against the
--                        retry budget), token, worker, expires, started,
--                        ended, outcome, reason, record, version, then its
--                        attempt records (JSON, one a line, in order).
--                        Written the first time the run changes (its first
--                        lease, or its close), not at seeding: a run
--                        without one is pending with no attempt, its
--                        position in its `fresh:ARM` entry or its score in
--                        `pending:ARM` or `rounds` (`create_run`). A
--                        ledger seeded before has every run's state, which
--                        is as good. Its arm, question and repeat are read
--                        from its id (`arm_of`, `q_of`, `rep_of`). One
--                        field of one hash, not keys of its own, so a batch
--                        of leases or results reads and writes every run it
--                        touches in one HMGET and one HSET (`runs_read`,
--                        `runs_write`), where a hash and a list a run cost
--                        two or three commands a run (issue 24). Ledgers
--                        written before (layout 1: a hash `run:ID` and a
--                        list `attempts:ID` a run) are moved into it once,
--                        by `migrate.lua`, before anything else runs on
--                        them; `layout` in meta says which a ledger has.
--   P.."questions"       hash: question_id -> text
--   P.."arms"            hash: ARM|cap, ARM|leased, ARM|paused, ARM|versions
--                        (JSON list: the pinned label and cohort.toml's
--                        accepted_versions at seeding, then each label
--                        accepted on resume, `arm.lua`),
--                        ARM|manual (present, "1", for a manual arm),
--                        ARM|hold (ms: no lease before it, from Retry-After)
--   P.."counts"          hash: o|OUTCOME, c|CLASS, a|ARM|OUTCOME, a|ARM|planned
--   P.."order"           list: run ids in planned order
--   P.."discarded"       list: stale reports (JSON)
--   P.."events"          stream: the audit log (capped, ~100000 entries);
--                        an entry is one event (at_ms, kind, run_id,
--                        detail), or the `final` events of one batch of
--                        results (at_ms, kind, then run_id and detail per
--                        run: `Tally:final`)

local META = KEYS[1]
local P = string.sub(META, 1, -5)

-- The lifecycle tables RETRYABLE (class -> true: retried), EXCUSED (class
-- -> true: not counted against the retry budget), FINAL_OF (class -> the
-- final outcome it gives) and FITS (outcome -> class -> true: a final
-- result may carry the pair) are not written here: redis.rs generates them
-- from cohort_core::lifecycle (run_retryable, excused, final_outcome_of,
-- check_final) and puts them before this prelude when the scripts load.

local function event(now, kind, run_id, detail)
  redis.call('XADD', P .. 'events', 'MAXLEN', '~', 100000, '*',
    'at_ms', now, 'kind', kind, 'run_id', run_id or '', 'detail', detail or '')
end

-- The live server's run id: it changes whenever the server restarts or
-- another one (a replica) takes over, which may have lost writes.
local function live_run()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end

-- Refuses to change anything on a server that restarted, or was replaced,
-- since the ledger last confirmed its epoch (`recover.lua` confirms it):
-- what it holds may be an older state than the one reported to workers.
-- Every script that changes state starts with
-- `local stop = guard() if stop then return stop end`.
-- It also refuses a ledger whose run states are not in the layout these
-- scripts read (`OLDLAYOUT`: `migrate.lua` moves them; RedisLedger::connect
-- runs it).
-- LAYOUT, the layout these scripts read, is defined by redis.rs before
-- this prelude (RUNS_LAYOUT), as seeding writes it.
local function old_layout(found)
  if found == LAYOUT then return nil end
  return redis.error_reply('OLDLAYOUT the ledger keeps its runs in layout ' .. tostring(found or 1)
    .. ', not ' .. LAYOUT .. ': connect to it again to move them')
end
local function guard()
  local live = live_run()
  local m = redis.call('HMGET', META, 'redis_run', 'layout')
  if m[1] ~= live then
    return redis.error_reply('RESTARTED redis server ' .. tostring(live) .. ' has not confirmed this ledger yet')
  end
  return old_layout(m[2])
end

-- The layout check alone, for the scripts that do not change state, or
-- confirm the ledger (`recover.lua`, `held.lua`).
local function layout_guard()
  return old_layout(redis.call('HGET', META, 'layout'))
end

-- Counts `n` acknowledged reports (1 when nil); returns the new sequence
-- number (that of the last of them).
local function bump_seq(n)
  return redis.call('HINCRBY', META, 'seq', n or 1)
end

-- Whether the ledger is recovering at `now` (no lease granted, none expired).
local function recovering(now)
  return tonumber(redis.call('HGET', META, 'recovering_until') or '0') > now
end

-- A run's arm, from its id `{q}:{arm}:{rep}` (nil when it has no two
-- colons). Plain finds, not a pattern: this runs for every result.
local function arm_of(run_id)
  local a = string.find(run_id, ':', 1, true)
  local b = a and a > 1 and string.find(run_id, ':', a + 1, true)
  if not b or b == a + 1 then return nil end
  return string.sub(run_id, a + 1, b - 1)
end

-- The run's question, from its id `{q}:{arm}:{rep}`.
local function q_of(run_id)
  local a = string.find(run_id, ':', 1, true)
  if not a or a == 1 then return nil end
  return string.sub(run_id, 1, a - 1)
end

-- The run's repeat (its round), from its id `{q}:{arm}:{rep}`.
local function rep_of(run_id)
  return tonumber(string.match(run_id, ':(%d+)$'))
end

-- A run waiting in `rounds` scores ROUND_SCALE * round + position, so its
-- position needs no state (positions stay below 2^32, rounds below 2^21:
-- exact in a double).
local ROUND_SCALE = 4294967296

-- A run's state (the layout: P.."runs") is a table of strings, as a hash's
-- HMGET gave them: pos, state, attempts, excused, token, worker, expires,
-- started, ended, outcome, reason, record, version (nil when a field is
-- empty; `version` is nil when no version was recorded and '' when an empty
-- one was), and `log`, its attempt records (JSON, one a line: JSON text
-- holds no raw newline). Packed, the fields are joined by NUL bytes, the
-- log last; in the three free-text ones (worker, reason, version) a NUL is
-- written \1\2 and a \1 is written \1\1, so every value comes back exactly.
-- `version` is written with a leading '=' when present. One
-- `struct.unpack` unpacks a run (Redis's bundled struct library: `s` reads
-- a string up to its NUL, in C) and one concatenation packs it: a batch's
-- runs cost one HMGET and one HSET, not a command each. (Issue 24, an EVAL
-- microbench: unpacking by a `string.match` of 14 captures cost 3.0 us a
-- run, 1.8 of them in Lua's pattern matcher, and packing by a
-- `table.concat` 1.0 us; now 1.26 and 0.66 us.)
local RUNS = P .. 'runs'
-- The counts' hash, named once rather than concatenated for every result.
local COUNTS = P .. 'counts'
local UNPACK_RUN = string.rep('s', 13)
local NUL = '\0'

local function escape(s)
  if not (string.find(s, '\0', 1, true) or string.find(s, '\1', 1, true)) then return s end
  return (string.gsub(string.gsub(s, '\1', '\1\1'), '%z', '\1\2'))
end

local function unescape(s)
  if not string.find(s, '\1', 1, true) then return s end
  return (string.gsub(s, '\1(.)', function(c) if c == '\2' then return '\0' end return c end))
end

local function present(s)
  if s == '' then return nil end
  return s
end

-- An empty field is absent (nil); written inline, not as a call of
-- `present` a field, which cost a third of the unpacking.
local function unpack_run(v)
  local ok, pos, state, attempts, excused, token, worker, expires, started, ended, outcome, reason, record, version,
    log_at = pcall(struct.unpack, UNPACK_RUN, v)
  if not ok then error('a run state in ' .. RUNS .. ' is not in layout ' .. LAYOUT) end
  return { pos = pos ~= '' and pos or nil, state = state ~= '' and state or nil,
    attempts = attempts ~= '' and attempts or nil, excused = excused ~= '' and excused or nil,
    token = token ~= '' and token or nil, worker = worker ~= '' and unescape(worker) or nil,
    expires = expires ~= '' and expires or nil, started = started ~= '' and started or nil,
    ended = ended ~= '' and ended or nil, outcome = outcome ~= '' and outcome or nil,
    reason = reason ~= '' and unescape(reason) or nil, record = record ~= '' and record or nil,
    version = version ~= '' and unescape(string.sub(version, 2)) or nil, log = string.sub(v, log_at) }
end

local function pack_run(r)
  return (r.pos or '') .. NUL .. (r.state or '') .. NUL .. (r.attempts or '') .. NUL .. (r.excused or '') .. NUL
    .. (r.token or '') .. NUL .. (r.worker and escape(r.worker) or '') .. NUL .. (r.expires or '') .. NUL
    .. (r.started or '') .. NUL .. (r.ended or '') .. NUL .. (r.outcome or '') .. NUL
    .. (r.reason and escape(r.reason) or '') .. NUL .. (r.record or '') .. NUL
    .. (r.version and ('=' .. escape(r.version)) or '') .. NUL .. (r.log or '')
end

-- The run states this script call read (id -> state, or false: none) and
-- the ids of those it changed, in order. A script changes a run's state in
-- place (a table `run_of` gave, or `create_run`'s) and says so with
-- `run_changed`; every changed state is written once, at the end of the
-- call (`runs_write`, which redis.rs runs after every script's body), so a
-- script that fails part way writes none of them.
-- The lists a batch builds a few entries a run into (here and in the
-- scripts) are filled through a count, not `#list + 1`: Lua 5.1 finds a
-- table's length by a binary search, and those searches were 2% of the
-- scripts' time (issue 24).
local RUN_CACHE, RUN_CHANGED, RUN_CHANGED_IDS, RUN_CHANGED_N = {}, {}, {}, 0

-- The run's state, or nil if it has none yet.
local function run_of(run_id)
  local r = RUN_CACHE[run_id]
  if r == nil then
    local v = redis.call('HGET', RUNS, run_id)
    r = v and unpack_run(v) or false
    RUN_CACHE[run_id] = r
  end
  return r or nil
end

local function run_changed(run_id, r)
  RUN_CACHE[run_id] = r
  if not RUN_CHANGED[run_id] then
    RUN_CHANGED[run_id] = true
    RUN_CHANGED_N = RUN_CHANGED_N + 1
    RUN_CHANGED_IDS[RUN_CHANGED_N] = run_id
  end
  return r
end

-- Formats an integer for a run's state (a Lua number concatenated would
-- be written as a float past 1e14).
local function int(n)
  return string.format('%d', n)
end

-- Creates the state of a run that has none yet, with what a fresh run has:
-- pending, no attempt, at `pos`. Returns it.
local function create_run(run_id, pos)
  return run_changed(run_id, { pos = tostring(pos), state = 'pending', attempts = '0', log = '' })
end

-- Appends an attempt record (JSON) to a run's log.
local function log_attempt(r, json)
  if r.log == '' then
    r.log = json
  else
    r.log = r.log .. '\n' .. json
  end
end

-- A run's attempt records (JSON), in order.
local function attempts_of(r)
  local out = {}
  if not r or r.log == '' then return out end
  for line in string.gmatch(r.log, '[^\n]+') do out[#out + 1] = line end
  return out
end

-- The JSON of a run's last attempt record, or nil.
local function last_attempt(r)
  if not r or r.log == '' then return nil end
  return string.match(r.log, '([^\n]*)$')
end

-- A `fresh:ARM` entry's position, run id and position as written.
local function fresh_entry(e)
  local bar = string.find(e, '|', 1, true)
  if not bar or bar == 1 or bar == #e then return nil, nil end
  local pos_s = string.sub(e, 1, bar - 1)
  return tonumber(pos_s), string.sub(e, bar + 1), pos_s
end

-- An arm's queue read from its head in position order: the merge of
-- `pending:ARM` and `fresh:ARM`, read `chunk` entries of each at a time as
-- the merge reaches them, so a lease over many arms reads a few entries of
-- each, not `room` of every one. Nothing is removed while it reads (the
-- caller trims what it took at the end), so the offsets hold. `head()` is
-- the next run's position, or nil once `room` are taken or the queue is
-- empty; `take()` takes that run: its id, its position as written and
-- whether it came from the fresh list. The fresh ones taken are a
-- prefix of the list (`fresh_taken` of them), the others are in
-- `from_pending`. Each list is read into plain arrays (ids, positions,
-- positions as strings), not a table a run: a lease makes no table per run.
local Queue = {}
Queue.__index = Queue

local function queue(arm, room, chunk)
  return setmetatable({ arm = arm, room = room, chunk = chunk, taken = 0, fresh_taken = 0, from_pending = {},
    z_id = {}, z_pos = {}, z_str = {}, zi = 1, zend = false,
    f_id = {}, f_pos = {}, f_str = {}, fi = 1, fend = false }, Queue)
end

-- Reads the next chunk of the pending zset.
function Queue:more_pending()
  local ids, pos, str = self.z_id, self.z_pos, self.z_str
  local read = #ids
  local z = redis.call('ZRANGE', P .. 'pending:' .. self.arm, read, read + self.chunk - 1, 'WITHSCORES')
  for i = 1, #z, 2 do
    read = read + 1
    ids[read], pos[read], str[read] = z[i], tonumber(z[i + 1]), z[i + 1]
  end
  if #z < 2 * self.chunk then self.zend = true end
end

-- Reads the next chunk of the fresh list.
function Queue:more_fresh()
  local ids, pos, str = self.f_id, self.f_pos, self.f_str
  local read = #ids
  local f = redis.call('LRANGE', P .. 'fresh:' .. self.arm, read, read + self.chunk - 1)
  for i = 1, #f do
    read = read + 1
    pos[read], ids[read], str[read] = fresh_entry(f[i])
  end
  if #f < self.chunk then self.fend = true end
end

function Queue:head()
  if self.taken >= self.room then return nil end
  if self.zi > #self.z_id and not self.zend then self:more_pending() end
  if self.fi > #self.f_id and not self.fend then self:more_fresh() end
  local zp, fp = self.z_pos[self.zi], self.f_pos[self.fi]
  if zp and (not fp or zp < fp) then return zp end
  return fp
end

-- Takes the run `head()` named: id, position as written, fresh.
function Queue:take()
  local zi, fi = self.zi, self.fi
  local zp, fp = self.z_pos[zi], self.f_pos[fi]
  self.taken = self.taken + 1
  if zp and (not fp or zp < fp) then
    self.zi = zi + 1
    local id = self.z_id[zi]
    self.from_pending[#self.from_pending + 1] = id
    return id, self.z_str[zi], false
  end
  self.fi = fi + 1
  self.fresh_taken = self.fresh_taken + 1
  return self.f_id[fi], self.f_str[fi], true
end

-- Takes a run without a state out of the queue it waits in (its arm's
-- `pending` or `fresh` list, or `rounds`) and returns its position, or nil
-- if it waits in none (no such run). Only `reclaim` (after a rollback)
-- needs this: finding a run in its `fresh` list costs a scan of the
-- `order` list up to it (LPOS) and of the fresh list up to it (LREM),
-- where a lease a rollback lost is near the head.
local function take_waiting(run_id, arm)
  local s = redis.call('ZSCORE', P .. 'pending:' .. arm, run_id)
  if s then
    redis.call('ZREM', P .. 'pending:' .. arm, run_id)
    return tonumber(s)
  end
  s = tonumber(redis.call('ZSCORE', P .. 'rounds', run_id) or '0')
  if s >= ROUND_SCALE then
    redis.call('ZREM', P .. 'rounds', run_id)
    return s % ROUND_SCALE
  end
  local pos = redis.call('LPOS', P .. 'order', run_id)
  if pos and redis.call('LREM', P .. 'fresh:' .. arm, 1, pos .. '|' .. run_id) == 1 then return pos end
  return nil
end

-- Counter moves (HINCRBY) of one script call. `IMMEDIATE` writes each at
-- once; a `tally()` gathers them and writes each key's fields once, with
-- the sums, at `flush()`: a batch of 32 results then moves `finished` by
-- one HINCRBY instead of 32, and its counts by two commands. A script is
-- atomic, so nothing can read a count between the moves and the flush; a
-- script that tallies reads no count it moves before it flushes.
--
-- A tally gathers the `final` events of its runs too (`Tally:final`), and
-- `flush()` writes them as one audit-log entry: `at_ms`, `kind` `final`,
-- then a `run_id` and a `detail` per run, in the order they ended (one
-- XADD for a batch of results, where an entry each cost a batch of 32
-- results as much as its counts and lease set together: issue 24). The
-- reader (`RedisLedger::events`) gives each run its own event, as for an
-- entry of one.
local IMMEDIATE = {
  add = function(_, key, field, n) redis.call('HINCRBY', key, field, n) end,
  final = function(_, now, run_id, detail) event(now, 'final', run_id, detail) end,
}
local Tally = {}
Tally.__index = Tally
function Tally:add(key, field, n)
  local fields = self.keys[key]
  if not fields then
    fields = {}
    self.keys[key] = fields
  end
  fields[field] = (fields[field] or 0) + n
end
-- Every `final` event a call gathers is at the same `now` (a script's).
function Tally:final(now, run_id, detail)
  self.finals_at = now
  local f, n = self.finals, self.n_finals
  f[n + 1], f[n + 2], f[n + 3], f[n + 4] = 'run_id', run_id, 'detail', detail
  self.n_finals = n + 4
end
-- A key with one field moved takes an HINCRBY; one with several, an
-- HMGET of them and one HSET of the sums (two commands, not one per field).
function Tally:flush()
  for key, fields in pairs(self.keys) do
    local names = {}
    for field, n in pairs(fields) do
      if n ~= 0 then names[#names + 1] = field end
    end
    if #names == 1 then
      redis.call('HINCRBY', key, names[1], fields[names[1]])
    elseif #names > 1 then
      local held = redis.call('HMGET', key, unpack(names))
      local hset = { 'HSET', key }
      for i, field in ipairs(names) do
        hset[#hset + 1] = field
        hset[#hset + 1] = string.format('%d', (tonumber(held[i]) or 0) + fields[field])
      end
      redis.call(unpack(hset))
    end
  end
  self.keys = {}
  -- The gathered final events, 200 runs an entry at most (800 arguments:
  -- within `unpack`'s reach).
  local f, n = self.finals, self.n_finals
  for first = 1, n, 800 do
    local xadd = { 'XADD', P .. 'events', 'MAXLEN', '~', 100000, '*', 'at_ms', self.finals_at, 'kind', 'final' }
    local k = #xadd
    for i = first, math.min(first + 799, n) do
      k = k + 1
      xadd[k] = f[i]
    end
    redis.call(unpack(xadd, 1, k))
  end
  self.finals, self.n_finals = {}, 0
end
local function tally()
  return setmetatable({ keys = {}, finals = {}, n_finals = 0 }, Tally)
end

-- Runs a command over `args` (a list) after `head` (a list: the command
-- and its first arguments), in calls of at most 1,000 arguments (Lua's
-- `unpack` has a stack limit). Returns the elements of the replies in
-- order, for a command that answers with a list (HMGET).
local function call_spread(head, args)
  local out, n_out = {}, 0
  local n_args, n_head = #args, #head
  for first = 1, n_args, 1000 do
    local call = { unpack(head) }
    local n = n_head
    for i = first, math.min(first + 999, n_args) do
      n = n + 1
      call[n] = args[i]
    end
    local reply = redis.call(unpack(call, 1, n))
    if type(reply) == 'table' then
      for i = 1, #reply do
        n_out = n_out + 1
        out[n_out] = reply[i]
      end
    end
  end
  return out
end

-- Reads the states of the runs `ids` this call has not read yet, in one
-- HMGET: `run_of` then finds them without a command each.
local function runs_read(ids)
  local wanted, n = {}, 0
  for i = 1, #ids do
    local id = ids[i]
    if RUN_CACHE[id] == nil then
      n = n + 1
      wanted[n] = id
    end
  end
  if n == 0 then return end
  local found = call_spread({ 'HMGET', RUNS }, wanted)
  for i, id in ipairs(wanted) do RUN_CACHE[id] = found[i] and unpack_run(found[i]) or false end
end

-- Writes every run state this call changed, in one HSET.
local function runs_write()
  if RUN_CHANGED_N == 0 then return end
  local args = {}
  for i = 1, RUN_CHANGED_N do
    local id = RUN_CHANGED_IDS[i]
    args[2 * i - 1], args[2 * i] = id, pack_run(RUN_CACHE[id])
  end
  call_spread({ 'HSET', RUNS }, args)
  RUN_CHANGED, RUN_CHANGED_IDS, RUN_CHANGED_N = {}, {}, 0
end

-- Ends a run with `outcome`: the state and every count move together.
-- `t` gathers the counts and the `final` event (IMMEDIATE when nil).
local function finalize(run_id, arm, outcome, reason, now, t)
  local r = run_of(run_id)
  r.state, r.outcome, r.reason, r.ended = 'final', outcome, reason, tostring(now)
  run_changed(run_id, r)
  t = t or IMMEDIATE
  t:add(META, 'finished', 1)
  t:add(COUNTS, 'o|' .. outcome, 1)
  t:add(COUNTS, 'a|' .. arm .. '|' .. outcome, 1)
  t:final(now, run_id, outcome .. (reason ~= '' and (': ' .. reason) or ''))
end

-- Records an attempt (JSON from the caller) with its worker, number and token.
local function record_attempt(run_id, attempt_json, worker, number, token)
  local a = cjson.decode(attempt_json)
  a['worker'] = worker
  a['attempt'] = number
  a['token'] = token
  log_attempt(run_changed(run_id, run_of(run_id)), cjson.encode(a))
  redis.call('HINCRBY', COUNTS, 'c|' .. a['class'], 1)
  return a
end

-- The opening of the JSON `push_attempt` writes for an attempt of
-- `worker`: made once a call, not once a result (a `cjson.encode` a result
-- was a measurable share of a finish).
local function attempt_head(worker)
  return '{"worker":' .. cjson.encode(worker) .. ',"attempt":'
end

-- `record_attempt` without decoding: `tail` is the attempt's JSON object
-- without `worker`, `attempt` and `token` and without its opening brace
-- (the caller leaves them out, sends `class` apart and cuts the brace, so
-- the JSON is one concatenation), `head` is `attempt_head(worker)` and
-- `number` the attempt's number as a string. The counts move through `t`.
local function push_attempt(run_id, tail, class, head, number, token, t)
  local json
  if tail ~= '}' then
    json = head .. number .. ',"token":' .. token .. ',' .. tail
  else
    json = head .. number .. ',"token":' .. token .. '}'
  end
  log_attempt(run_changed(run_id, run_of(run_id)), json)
  t:add(COUNTS, 'c|' .. class, 1)
end

-- The number an attempt under a run's current lease is recorded with: the
-- one its worker reports (`reported`, the lease's number, as the run record
-- has it) when that is past the run's count (grants lost in a rollback and
-- taken back by a heartbeat, which cannot say the number), else the count.
local function attempt_number(run_id, reported)
  local r = run_of(run_id)
  local n = tonumber(r.attempts or '0')
  if reported and reported > n then
    r.attempts = int(reported)
    run_changed(run_id, r)
    return reported
  end
  return n
end

local function discard(run_id, token, worker, kind, now, class, outcome)
  local d = { run_id = run_id, token = token, worker = worker, kind = kind, at_ms = now }
  if class then d['class'] = class end
  if outcome then d['outcome'] = outcome end
  redis.call('RPUSH', P .. 'discarded', cjson.encode(d))
  redis.call('HINCRBY', META, 'discarded', 1)
  event(now, 'discarded', run_id, kind .. ' with stale token ' .. token .. ' from ' .. worker)
end

-- Whether `run_id` is leased under `token` right now.
local function is_current(run_id, token)
  local r = run_of(run_id)
  return r ~= nil and r.state == 'leased' and r.token == tostring(token)
end

-- Ends a lease: out of the lease set, the arm's slot freed.
local function end_lease(run_id, arm)
  redis.call('ZREM', P .. 'leases', run_id)
  redis.call('HINCRBY', P .. 'arms', arm .. '|leased', -1)
end

-- Puts a run back in the queue: ready at its position, or delayed.
local function requeue(run_id, arm, not_before, now)
  local r = run_of(run_id)
  r.state, r.token, r.worker = 'pending', '0', nil
  run_changed(run_id, r)
  if not_before > now then
    redis.call('ZADD', P .. 'delayed', not_before, run_id)
  else
    redis.call('ZADD', P .. 'pending:' .. arm, r.pos, run_id)
  end
end

-- Takes a run back for the holder of a lease the ledger lost in a
-- rollback. Only for a token issued before the last recovery (`token <
-- token_floor`), on a run that is not final, when nothing later than the
-- token happened to it: it is pending with no attempt recorded under this
-- token or a later one, or leased under an older token (whose holder's
-- lease this one had replaced: its `worker_lost` attempt, lost too, is
-- recorded again, marked `reclaimed_by`: a replay of the real attempt
-- replaces it, attempt.lua). The run is then leased to `worker` under
-- `token` until `now + ttl`, as the lost grant had it, as attempt `number`
-- when the caller knows it (the lease's number, which the worker's run
-- record gives: the grants the rollback lost are not counted again), else
-- as the run's next. Returns whether it did.
local function reclaim(run_id, token, worker, now, ttl, number)
  local t = tonumber(token)
  if not t or t >= tonumber(redis.call('HGET', META, 'token_floor') or '0') then return false end
  local r = run_of(run_id)
  local arm = arm_of(run_id)
  if not r then
    -- No state: a run that never changed (pending), or no run at all. It
    -- leaves its queue only if it is to be leased (below).
    local pos = arm and take_waiting(run_id, arm)
    if not pos then return false end
    r = create_run(run_id, pos)
  end
  if r.state == 'final' then return false end
  if r.state == 'leased' then
    local held = tonumber(r.token)
    if held >= t then return false end
    local lost = cjson.encode({ class = 'worker_lost', http_status = 0,
      detail = 'lease under token ' .. held .. ' replaced by token ' .. t .. ' in writes the ledger lost',
      started_ms = now, ended_ms = now, reclaimed_by = t })
    record_attempt(run_id, lost, r.worker or '', tonumber(r.attempts), held)
  else
    local last = last_attempt(r)
    if last and tonumber(cjson.decode(last)['token'] or 0) >= t then return false end
    redis.call('ZREM', P .. 'pending:' .. arm, run_id)
    redis.call('ZREM', P .. 'delayed', run_id)
    redis.call('ZREM', P .. 'rounds', run_id)
    redis.call('HINCRBY', P .. 'arms', arm .. '|leased', 1)
  end
  local attempts
  if number and number > tonumber(r.attempts or '0') then
    attempts = number
  else
    attempts = tonumber(r.attempts or '0') + 1
  end
  r.attempts = int(attempts)
  if attempts - tonumber(r.excused or '0') == 1 then r.started = int(now) end
  r.state, r.token, r.worker, r.expires = 'leased', int(t), worker, int(now + ttl)
  run_changed(run_id, r)
  redis.call('ZADD', P .. 'leases', now + ttl, run_id)
  event(now, 'reclaimed', run_id, 'lease under token ' .. t .. ' taken back by ' .. worker
    .. ': the ledger had lost it in a rollback')
  return true
end

-- The rounds of a repeated-run cohort (mirror of cohort_ledger's
-- PlanHeader::rounds_open / rounds_closed): round k opens
-- (k-1)*round_every_ms after the first start and has its own window_ms.
local function round_params()
  local m = redis.call('HMGET', META, 'round_every_ms', 'rounds', 'window_start', 'window_ms')
  return tonumber(m[1] or '0'), tonumber(m[2] or '1'), m[3] and tonumber(m[3]), tonumber(m[4])
end

-- Rounds 1..n open for leasing at `now`.
local function rounds_open(now)
  local every, rounds, start = round_params()
  if every <= 0 then return rounds end
  if not start then return 1 end
  return math.min(rounds, math.floor(math.max(now - start, 0) / every) + 1)
end

-- Rounds 1..n whose own window has closed at `now`.
local function rounds_closed(now)
  local every, rounds, start, window = round_params()
  if not start or now < start + window then return 0 end
  if every <= 0 then return rounds end
  return math.min(rounds, math.floor((now - start - window) / every) + 1)
end

-- Moves the runs of the rounds that have opened into their arms' queues.
local function release_rounds(now)
  -- Nothing waits (a cohort of one round, or every round open): one
  -- command, not three, on every lease.
  if redis.call('EXISTS', P .. 'rounds') == 0 then return end
  local open = rounds_open(now)
  local ids = redis.call('ZRANGEBYSCORE', P .. 'rounds', ROUND_SCALE,
    '(' .. string.format('%.0f', (open + 1) * ROUND_SCALE), 'WITHSCORES')
  for i = 1, #ids, 2 do
    redis.call('ZREM', P .. 'rounds', ids[i])
    redis.call('ZADD', P .. 'pending:' .. arm_of(ids[i]), tonumber(ids[i + 1]) % ROUND_SCALE, ids[i])
  end
  -- A ledger seeded before scores the round alone: the position is in the
  -- run's state.
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'rounds', '-inf', open)) do
    redis.call('ZREM', P .. 'rounds', id)
    redis.call('ZADD', P .. 'pending:' .. arm_of(id), run_of(id).pos, id)
  end
end

-- Why nothing can be leased any more, or nil: a run sent back to the queue
-- then would never run, so it is closed at once instead. With `run_id`,
-- the end of that run's round's window counts too.
local function closed_reason(arm, now, run_id)
  if redis.call('HEXISTS', META, 'aborted') == 1 then return 'aborted' end
  local w = redis.call('HMGET', META, 'window_end', 'window_closed')
  local closed = w[2] == '1' or (w[1] and now >= tonumber(w[1]))
  if not closed and run_id then
    closed = rep_of(run_id) <= rounds_closed(now)
  end
  if closed then
    if redis.call('HEXISTS', P .. 'arms', arm .. '|paused') == 1 then return 'arm_paused' end
    return 'window_closed'
  end
  return nil
end

-- The retry policy (mirror of cohort_core RetryPolicy::decide), given the
-- counted attempts (excused ones left out) and the provider's Retry-After
-- in ms (0 = none). Returns ('retry', not_before), ('final', outcome) or
-- ('pause', nil) for an excused class.
local function decide(class, attempts, started, now, retry_after)
  if EXCUSED[class] then return 'pause', nil end
  local m = redis.call('HMGET', META, 'max_attempts', 'initial_backoff_ms', 'max_backoff_ms', 'max_total_ms')
  local max_attempts, initial, max_backoff, max_total = tonumber(m[1]), tonumber(m[2]), tonumber(m[3]), tonumber(m[4])
  if RETRYABLE[class] and attempts < max_attempts and (now - started) < max_total then
    local doublings = math.min(math.max(attempts - 1, 0), 32)
    local backoff = math.min(initial * (2 ^ doublings), max_backoff)
    return 'retry', now + math.max(backoff, retry_after)
  end
  return 'final', FINAL_OF[class]
end

-- The pause reason of an auth_error (mirror of lifecycle::auth_pause_reason).
local function auth_pause_reason(arm, status, detail)
  local what = 'an authentication failure'
  if status > 0 then what = 'HTTP ' .. status end
  local prefix = 'HTTP ' .. status .. ': '
  if string.sub(detail, 1, #prefix) == prefix then detail = string.sub(detail, #prefix + 1) end
  local said = ''
  if detail ~= '' then said = ' (' .. detail .. ')' end
  return 'auth_error: ' .. what .. ' from the system under test' .. said
    .. '; fix the key, then run `cohort resume DIR --arm ' .. arm .. ' --ack "key fixed"`'
end

-- Holds an arm for everyone until `until_ms` (a provider's Retry-After); the
-- later hold wins. Logged when it extends the hold.
local function hold_arm(arm, until_ms, now)
  local current = tonumber(redis.call('HGET', P .. 'arms', arm .. '|hold') or '0')
  if until_ms > current then
    redis.call('HSET', P .. 'arms', arm .. '|hold', until_ms)
    event(now, 'arm_held', '', arm .. ': held until ' .. until_ms .. ' (Retry-After)')
  end
end

-- Applies a failed attempt to a leased run: retry, final, or (auth_error)
-- back to the queue with the arm paused. `status` is the HTTP status (0 for
-- none), `retry_after` the provider's Retry-After in ms (0 for none).
-- Returns ('retry', not_before), ('final', outcome) or ('pause', reason).
local function after_failure(run_id, arm, class, detail, now, status, retry_after)
  local r = run_changed(run_id, run_of(run_id))
  local counted = tonumber(r.attempts) - tonumber(r.excused or '0')
  if retry_after > 0 then hold_arm(arm, now + retry_after, now) end
  local kind, value = decide(class, counted, tonumber(r.started), now, retry_after)
  end_lease(run_id, arm)
  if kind == 'pause' then
    r.excused = int(tonumber(r.excused or '0') + 1)
    counted = counted - 1
    local closed = closed_reason(arm, now, run_id)
    if closed then
      local outcome = 'not_run'
      if counted > 0 then outcome = 'unavailable' end
      finalize(run_id, arm, outcome, closed, now)
      return 'final', outcome
    end
    -- No counted attempt left: the run has not started, as after a release.
    if counted == 0 then r.started = '0' end
    requeue(run_id, arm, 0, now)
    local reason = auth_pause_reason(arm, status, detail or '')
    redis.call('HSET', P .. 'arms', arm .. '|paused', reason)
    event(now, 'arm_paused', '', arm .. ': ' .. reason)
    event(now, 'requeued', run_id, class .. ' (excused), back at its place in the queue')
    return 'pause', reason
  end
  local closed = kind == 'retry' and closed_reason(arm, now, run_id)
  if closed then
    finalize(run_id, arm, 'unavailable', class .. ', no retry possible: ' .. closed, now)
    return 'final', 'unavailable'
  end
  if kind == 'retry' then
    requeue(run_id, arm, value, now)
    event(now, 'retry', run_id, class .. ', not before ' .. value)
  else
    local reason = class
    if detail and detail ~= '' then reason = class .. ': ' .. detail end
    finalize(run_id, arm, value, reason, now)
  end
  return kind, value
end

-- Finalises up to `limit` pending runs (ready or delayed) with their
-- closing outcome; `reason` is used unless the run's arm is paused and
-- `paused_reason` is given. Returns how many it finalised.
local function close_pending(reason, paused_reason, now, limit)
  local done = 0
  local arms = cjson.decode(redis.call('HGET', P .. 'arms', 'order'))
  -- `pos` is the run's position if it has no state yet (one is created).
  local function close_run(run_id, arm, pos)
    local r = run_of(run_id)
    local outcome = 'not_run'
    if not r then
      create_run(run_id, pos)
    elseif tonumber(r.attempts) - tonumber(r.excused or '0') > 0 then
      outcome = 'unavailable'
    end
    local why = reason
    if paused_reason and redis.call('HEXISTS', P .. 'arms', arm .. '|paused') == 1 then why = paused_reason end
    finalize(run_id, arm, outcome, why, now)
    done = done + 1
  end
  for _, arm in ipairs(arms) do
    if done >= limit then break end
    local ids = redis.call('ZRANGE', P .. 'pending:' .. arm, 0, limit - done - 1, 'WITHSCORES')
    for i = 1, #ids, 2 do
      redis.call('ZREM', P .. 'pending:' .. arm, ids[i])
      close_run(ids[i], arm, ids[i + 1])
    end
    if done < limit then
      local fresh = P .. 'fresh:' .. arm
      local entries = redis.call('LRANGE', fresh, 0, limit - done - 1)
      if #entries > 0 then redis.call('LTRIM', fresh, #entries, -1) end
      for _, e in ipairs(entries) do
        local pos, id = fresh_entry(e)
        close_run(id, arm, pos)
      end
    end
  end
  -- Delayed runs were leased (they have a state); in `rounds` the score
  -- holds the position (a score below ROUND_SCALE: the run's state does).
  for _, set in ipairs({ 'delayed', 'rounds' }) do
    if done < limit then
      local ids = redis.call('ZRANGE', P .. set, 0, limit - done - 1, 'WITHSCORES')
      for i = 1, #ids, 2 do
        redis.call('ZREM', P .. set, ids[i])
        close_run(ids[i], arm_of(ids[i]), set == 'rounds' and tonumber(ids[i + 1]) % ROUND_SCALE or nil)
      end
    end
  end
  return done
end

-- Closes the rounds whose own window has passed before the cohort's: up to
-- `limit` of their pending runs get their closing outcome (callers loop);
-- once none is left, rounds_closed moves and `round_closed` is logged.
-- The last round closes with the cohort's window. Returns how many it
-- finalised.
local function close_rounds_if_due(now, limit)
  local _, rounds = round_params()
  -- One round: its window is the cohort's (`close_window_if_due`).
  if rounds <= 1 then return 0 end
  local due = rounds_closed(now)
  local before = tonumber(redis.call('HGET', META, 'rounds_closed') or '0')
  if due <= before or due >= rounds then return 0 end
  release_rounds(now)
  local done = 0
  -- A run without a state waits in its arm's queue (score = position);
  -- delayed ones were leased and have one.
  local function sweep(set, arm)
    local ids = redis.call('ZRANGE', P .. set, 0, -1)
    for _, id in ipairs(ids) do
      if done >= limit then return end
      if rep_of(id) <= due then
        local r = run_of(id)
        local outcome = 'not_run'
        if not r then
          create_run(id, redis.call('ZSCORE', P .. set, id))
        elseif tonumber(r.attempts) - tonumber(r.excused or '0') > 0 then
          outcome = 'unavailable'
        end
        redis.call('ZREM', P .. set, id)
        local a = arm or arm_of(id)
        local why = 'window_closed'
        if redis.call('HEXISTS', P .. 'arms', a .. '|paused') == 1 then why = 'arm_paused' end
        finalize(id, a, outcome, why, now)
        done = done + 1
      end
    end
  end
  -- A fresh list holds round 1's runs only (seeding puts later rounds in
  -- `rounds`), all due: it is drained from its head. Should it hold a
  -- later round's run, that one moves to the arm's `pending` zset.
  local function sweep_fresh(arm)
    local fresh = P .. 'fresh:' .. arm
    while done < limit do
      local entries = redis.call('LRANGE', fresh, 0, limit - done - 1)
      if #entries == 0 then return end
      redis.call('LTRIM', fresh, #entries, -1)
      for _, e in ipairs(entries) do
        local pos, id = fresh_entry(e)
        if rep_of(id) <= due then
          create_run(id, pos)
          local why = 'window_closed'
          if redis.call('HEXISTS', P .. 'arms', arm .. '|paused') == 1 then why = 'arm_paused' end
          finalize(id, arm, 'not_run', why, now)
          done = done + 1
        else
          redis.call('ZADD', P .. 'pending:' .. arm, pos, id)
        end
      end
    end
  end
  for _, arm in ipairs(cjson.decode(redis.call('HGET', P .. 'arms', 'order'))) do
    sweep('pending:' .. arm, arm)
    sweep_fresh(arm)
  end
  sweep('delayed', nil)
  if done < limit then
    redis.call('HSET', META, 'rounds_closed', due)
    for round = before + 1, due do event(now, 'round_closed', '', 'round ' .. round .. "'s window closed") end
  end
  return done
end

-- Closes the window if it has passed. Returns (closed?, finalised).
local function close_window_if_due(now, limit)
  local w = redis.call('HMGET', META, 'window_start', 'window_end', 'window_closed')
  if not w[1] or now < tonumber(w[2]) then return false, 0 end
  if w[3] ~= '1' then
    redis.call('HSET', META, 'window_closed', '1')
    event(now, 'window_closed', '', 'window ended at ' .. w[2])
  end
  return true, close_pending('window_closed', 'arm_paused', now, limit)
end
