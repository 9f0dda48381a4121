-- acquire.lua: admit one request of one team at one upstream, or say how
-- long to wait. The same rule as judge-proxy/src/limiter/gcra.rs `decide`
-- (GCRA, in-share first, then borrowing at the borrow tolerance); keep the
-- two in step (test: local_and_redis_decide_alike).
--
-- KEYS (all share one hash tag, so the script also runs on Redis Cluster):
--   1 upstream request TAT    {P:jp:U}:rpm
--   2 upstream token TAT      {P:jp:U}:tpm
--   3 team request TAT        {P:jp:U}:team:T:rpm
--   4 team token TAT          {P:jp:U}:team:T:tpm
--   5 upstream pause-until    {P:jp:U}:pause
-- Values are microseconds since the Unix epoch, as decimal integers.
--
-- ARGV (microseconds, integers; computed by the caller so this script only
-- adds and compares, which doubles do exactly below 2^53):
--   1 now (0: use the Redis server's TIME, the one clock all replicas share)
--   2 upstream request increment   3 upstream token increment
--   4 upstream tolerance (in share) 5 borrow tolerance
--   6 team request increment        7 team token increment
--   8 team tolerance
--
-- Returns {admitted (0|1), in_share (0|1), wait_us}.
--
-- Atomicity: Redis runs a script alone, so the read-check-write of all
-- five keys is one step for every replica: two replicas can never both
-- take the last permit. TIME inside a script is allowed since Redis 5
-- (effects replication, the only mode of Redis 7).

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local up_req_inc, up_tok_inc = tonumber(ARGV[2]), tonumber(ARGV[3])
local up_tol, borrow_tol = tonumber(ARGV[4]), tonumber(ARGV[5])
local team_req_inc, team_tok_inc, team_tol = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])

local function tat(key)
  local v = redis.call('GET', key)
  if v then return tonumber(v) end
  return 0
end

local paused = tat(KEYS[5])
if paused > now then
  return {0, 0, paused - now}
end

-- Returns ok, new_tat, wait.
local function check(t, inc, tol)
  local new = math.max(t, now) + inc
  local eff = math.max(tol, inc)
  if new - now <= eff then return true, new, 0 end
  return false, new, new - now - eff
end

local function store(key, value)
  -- Keep a key as long as it can matter, plus a minute of slack.
  local ttl = math.ceil((value - now) / 1000) + 60000
  redis.call('SET', key, string.format('%.0f', value), 'PX', ttl)
end

local ur, ut, tr, tt = tat(KEYS[1]), tat(KEYS[2]), tat(KEYS[3]), tat(KEYS[4])

local ok1, n1, w1 = check(tr, team_req_inc, team_tol)
local ok2, n2, w2 = check(tt, team_tok_inc, team_tol)
local ok3, n3, w3 = check(ur, up_req_inc, up_tol)
local ok4, n4, w4 = check(ut, up_tok_inc, up_tol)
if ok1 and ok2 and ok3 and ok4 then
  store(KEYS[1], n3)
  store(KEYS[2], n4)
  store(KEYS[3], n1)
  store(KEYS[4], n2)
  return {1, 1, 0}
end

local ok5, n5, w5 = check(ur, up_req_inc, borrow_tol)
local ok6, n6, w6 = check(ut, up_tok_inc, borrow_tol)
if ok5 and ok6 then
  store(KEYS[1], n5)
  store(KEYS[2], n6)
  return {1, 0, 0}
end

local wait = math.min(math.max(w1, w2, w3, w4), math.max(w5, w6))
return {0, 0, math.max(wait, 1)}
