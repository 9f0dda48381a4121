-- migrate: moves a layout-1 ledger's runs (a hash `run:ID` and a list
-- `attempts:ID` a run) into the `runs` hash (common.lua, the layout), up
-- to `limit` runs of the planned order a call, from where the last call
-- stopped (`migrated` in meta). A run without a hash never changed and has
-- nothing to move. Once the order is done, `layout` is set and every other
-- script runs on the ledger again (`guard`). The fields hashes written
-- before issue 24 also hold (arm, q, rep) are read from the run's id and
-- are not kept (`pack_run` writes only the layout's fields). Atomic per
-- call, and a call made again after the last one finds the ledger moved
-- and changes nothing.
-- KEYS[1] meta. ARGV: now_ms, limit. Returns the runs moved by this call, or -1
-- once the ledger is in layout LAYOUT.
local now, limit = ARGV[1], tonumber(ARGV[2])
local m = redis.call('HMGET', META, 'layout', 'migrated')
if m[1] == LAYOUT then return -1 end
local from = tonumber(m[2] or '0')
local ids = redis.call('LRANGE', P .. 'order', from, from + limit - 1)
local moved = 0
for _, id in ipairs(ids) do
  local key, list = P .. 'run:' .. id, P .. 'attempts:' .. id
  local h = redis.call('HGETALL', key)
  if #h > 0 then
    local r = {}
    for i = 1, #h, 2 do r[h[i]] = h[i + 1] end
    -- An empty field reads as absent, as `unpack_run` gives it (but an
    -- empty `version`, which says the version was recorded empty).
    for _, f in ipairs({ 'pos', 'state', 'attempts', 'excused', 'token', 'worker', 'expires', 'started', 'ended',
      'outcome', 'reason', 'record' }) do
      r[f] = present(r[f] or '')
    end
    r.log = table.concat(redis.call('LRANGE', list, 0, -1), '\n')
    run_changed(id, r)
    redis.call('DEL', key, list)
    moved = moved + 1
  end
end
if #ids < limit then
  redis.call('HSET', META, 'layout', LAYOUT)
  redis.call('HDEL', META, 'migrated')
  event(now, 'migrated', '', 'run states moved into ' .. RUNS .. ' (layout ' .. LAYOUT .. ')')
else
  redis.call('HSET', META, 'migrated', int(from + #ids))
end
return moved
