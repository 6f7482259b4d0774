-- After a call: set its reservation to what it really used (tokens not used go back to the
-- window), learn the provider's limits from its headers, and after a 429 pause every worker.
-- ARGV 10 says what becomes of the reservation: "settle" (to ARGV 2-4), "keep" (as reserved:
-- the outcome is unknown, the provider may have done all of it) or "drop" (the call never left).
--
-- A rate-limit 429 (ARGV 11) whose headers still show room for this call in every limit they
-- report means the provider enforces its limit over a shorter interval than the window: the
-- burst shrinks to one call (reserve.lua paces strictly) and regrows slowly from there. Strict
-- pacing keeps a margin (the interval that much longer): ARGV 12 at first, doubled (up to ARGV
-- 13) by each such 429 of a call paced under the margin in force, since then the jitter between
-- our send and the provider's arrival stamp outgrew it. Calls already on their way when the
-- margin changed (refused together, one lesson) change it no further.
--
-- KEYS  1 window  2 entries  3 usage  4 learned  5 pause  6 pace   (as in reserve.lua)
-- ARGV  1 reservation id  2 requests used (0/1)  3 input tokens used  4 output tokens used
--       5 learned headers as JSON {"requests": [limit, remaining, reset ms], ...}, or "" when no
--         answer came back  6 ms the learned values live  7 pause ms (0: none)
--       8 window ms  9 ms an idle limiter's keys live  10 settle | keep | drop
--       11 1 when the answer was a rate-limit 429, else 0
--       12 the strict pacing margin to start from (a fraction)  13 the most it grows to

local DIMS = {'req', 'in', 'out'}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local window_ms = tonumber(ARGV[8])

local function int(x)
  return string.format('%d', math.floor(x))
end

local function parse(raw)
  local f = {}
  for w in string.gmatch(raw, '%S+') do f[#f + 1] = w end
  return {req = tonumber(f[1]), ['in'] = tonumber(f[2]), out = tonumber(f[3]),
          feature = f[4], user = f[5], flag = f[6]}
end

local function bump(key, field, by)
  if by ~= 0 and redis.call('HINCRBY', key, field, by) == 0 then
    redis.call('HDEL', key, field)
  end
end

local function account(key, e, sign)
  for _, d in ipairs(DIMS) do
    local v = e[d] * sign
    if v ~= 0 then
      redis.call('HINCRBY', key, d, v)
      if e.feature ~= '-' then bump(key, 'f|' .. e.feature .. '|' .. d, v) end
      if e.user ~= '-' then bump(key, 'u|' .. e.user .. '|' .. d, v) end
    end
  end
end

local raw = redis.call('HGET', KEYS[2], id)
local sent_at = tonumber(redis.call('ZSCORE', KEYS[1], id))
-- What this call needed of each limit the headers may report (before the settle changes it).
local need = {requests = 1, input_tokens = 0, output_tokens = 0, tokens = 0}
if raw then
  local e = parse(raw)
  need.input_tokens, need.output_tokens, need.tokens = e['in'], e.out, e['in'] + e.out
  if ARGV[10] == 'drop' then
    -- The call never left: its paced slot goes back too. Under strict pacing only the last
    -- slot given, and only while it is still ahead: giving back one that passed, or one with
    -- slots given after it, sent the next call right behind the last one that left (229 ms
    -- apart at 512 ms a slot: a short-interval 429 in bench/ratelimit.py).
    local pace = redis.call('HMGET', KEYS[6], 'interval', 'tat', 'strict')
    local interval, due = tonumber(pace[1]), tonumber(pace[2])
    if interval and ((pace[3] ~= '1' and pace[3] ~= '2') or (sent_at and due and sent_at > now
        and sent_at + interval >= due - 1)) then
      redis.call('HINCRBYFLOAT', KEYS[6], 'tat', -interval)
    end
  end
  if e.flag == '1' then redis.call('HINCRBY', KEYS[3], 'open', -1) end
  if ARGV[10] == 'drop' then
    account(KEYS[3], e, -1)
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[1], id)
  elseif ARGV[10] == 'keep' then
    redis.call('HSET', KEYS[2], id, table.concat({int(e.req), int(e['in']), int(e.out),
      e.feature, e.user, 0}, ' '))
  else
    local real = {req = tonumber(ARGV[2]), ['in'] = tonumber(ARGV[3]),
                  out = tonumber(ARGV[4])}
    account(KEYS[3], {req = real.req - e.req, ['in'] = real['in'] - e['in'],
      out = real.out - e.out, feature = e.feature, user = e.user}, 1)
    redis.call('HSET', KEYS[2], id, table.concat({int(real.req), int(real['in']),
      int(real.out), e.feature, e.user, 0}, ' '))
  end
end

if ARGV[5] ~= '' then
  local headers = cjson.decode(ARGV[5])
  local found = false
  for name, v in pairs(headers) do
    found = true
    redis.call('HSET', KEYS[4], name .. '_limit', int(v[1]), name .. '_remaining', int(v[2]),
      name .. '_reset', int(v[3]))
  end
  if headers.input_tokens or headers.output_tokens then
    -- The combined tokens headers only add up the two limits already kept.
    redis.call('HDEL', KEYS[4], 'tokens_limit', 'tokens_remaining', 'tokens_reset')
  end
  if ARGV[11] == '1' then
    local room = found
    for name, v in pairs(headers) do
      if v[2] < 0 or v[2] < (need[name] or 0) then room = false end
    end
    if room then
      redis.call('HSET', KEYS[4], 'burst', 1, 'burst_at', int(now))
      local base = tonumber(ARGV[12])
      local pace = redis.call('HMGET', KEYS[6], 'strict', 'margin')
      local margin_at = tonumber(redis.call('HGET', KEYS[4], 'margin_at'))
      local margin = nil
      if pace[1] ~= '2' then
        margin = base
      elseif sent_at == nil or margin_at == nil or sent_at >= margin_at then
        margin = math.min(tonumber(ARGV[13]), math.max(base, 2 * (tonumber(pace[2]) or base)))
      end
      if margin then
        redis.call('HSET', KEYS[4], 'margin', string.format('%.4f', margin), 'margin_at', int(now))
      end
    end
  end
  redis.call('HSET', KEYS[4], 'seen', int(now))
  if found then redis.call('HSET', KEYS[4], 'updated', int(now)) end
  redis.call('PEXPIRE', KEYS[4], ARGV[6])

  -- A window younger than itself (a first start, a Redis flush) misses calls made before it:
  -- take the provider's count of what it has seen, until its reset, when that is more.
  local since = tonumber(redis.call('HGET', KEYS[3], 'since'))
  if since == nil or now - since < window_ms then
    local dims = {requests = 'req', input_tokens = 'in', output_tokens = 'out'}
    for name, d in pairs(dims) do
      local v = headers[name]
      if v and v[2] >= 0 and v[3] > now then
        local theirs = v[1] - v[2]
        local ours = tonumber(redis.call('HGET', KEYS[3], d)) or 0
        if theirs > ours then
          local e = {req = 0, ['in'] = 0, out = 0, feature = '-', user = '-'}
          e[d] = theirs - ours
          local sync = 'sync:' .. name .. ':' .. int(now)
          redis.call('ZADD', KEYS[1], int(v[3] - window_ms), sync)
          redis.call('HSET', KEYS[2], sync, table.concat({int(e.req), int(e['in']),
            int(e.out), '-', '-', 0}, ' '))
          account(KEYS[3], e, 1)
        end
      end
    end
  end
end

local pause_ms = tonumber(ARGV[7])
if pause_ms > 0 then
  local until_ms = now + pause_ms
  local current = tonumber(redis.call('GET', KEYS[5]) or '0') or 0
  if until_ms > current then
    redis.call('SET', KEYS[5], int(until_ms), 'PX', int(pause_ms + 1000))
    -- Calls given a paced slot that has not come yet move behind the pause, one interval
    -- apart, and the pace goes on after them: none leaves during the pause, nor all at its end.
    local interval = tonumber(redis.call('HGET', KEYS[6], 'interval'))
    if interval then
      local ahead = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(now), '+inf')
      for i, ticket in ipairs(ahead) do
        redis.call('ZADD', KEYS[1], int(until_ms + (i - 1) * interval), ticket)
      end
      local due = tonumber(redis.call('HGET', KEYS[6], 'tat') or '0') or 0
      local after = until_ms + #ahead * interval
      if after > due then redis.call('HSET', KEYS[6], 'tat', string.format('%.3f', after)) end
    end
  end
end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[9]) end
return 1
