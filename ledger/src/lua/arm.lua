-- arm: pauses or resumes an arm, with the audit event, atomically.
-- KEYS[1] meta. ARGV: now_ms, 'pause'|'resume', arm, reason or
-- acknowledgement, version to accept on resume ('' for none).
-- Returns 1, or an error when the arm is unknown.
local now, op, arm, text, accept = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local stop = guard() if stop then return stop end
if redis.call('HEXISTS', P .. 'arms', arm .. '|cap') == 0 then
  return redis.error_reply('UNKNOWNARM ' .. arm)
end
if op == 'pause' then
  redis.call('HSET', P .. 'arms', arm .. '|paused', text)
  event(now, 'arm_paused', '', arm .. ': ' .. text)
else
  redis.call('HDEL', P .. 'arms', arm .. '|paused')
  local versions = cjson.decode(redis.call('HGET', P .. 'arms', arm .. '|versions'))
  local detail = arm .. ': ' .. text
  if accept ~= '' then
    local present = false
    for _, v in ipairs(versions) do if v == accept then present = true end end
    if not present then table.insert(versions, accept) end
    redis.call('HSET', P .. 'arms', arm .. '|versions', cjson.encode(versions))
    detail = detail .. ' (accepted version ' .. accept .. ')'
  end
  event(now, 'arm_resumed', '', detail)
end
return 1
