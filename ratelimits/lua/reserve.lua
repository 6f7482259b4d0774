-- Reserve one call (1 request, its input-token bound, its max_tokens) in the shared sliding
-- window of one provider and model, or say how long to wait. Atomic: every worker thread of
-- every process on every host runs this against the same keys, with Redis' own clock.
--
-- Requests are also paced (GCRA, a token bucket kept as one time): one call every window / R,
-- with a burst of at most ARGV 17 ms of that rate (at least one call), smaller while a
-- short-interval 429 was learned (settle.lua), and then further apart by the margin learned
-- with it; the sliding window still caps any window at R.
-- So no more than burst + t * R / window calls leave in any t, and never R at once.
--
-- KEYS  1 window (zset: reservation id -> ms)      2 entries (hash: id -> "req in out f u open")
--       3 usage (hash: sums in the window)          4 waiting (zset: job id -> counts until ms)
--       5 waitentries (hash: job id -> "req in out f u kind")
--       6 waitsum (hash: sums of what waits)        7 learned (hash: the provider's headers)
--       8 pause (string: ms until which no call starts)
--       9 holds (hash: feature -> ms of the next return slot)
--      10 pace (hash: tat = ms the next call is due at the paced rate, interval = ms per call,
--         strict = 1 while a short-interval burst is in force: sent.lua keeps late calls apart,
--         margin = how much longer the interval is then, as a fraction)
-- ARGV  1 reservation id  2 job id  3 feature  4 user  5 input tokens  6 output tokens
--       7 8 9 configured requests / input / output limit (-1: none)
--       10 window ms  11 feature weights (JSON object)  12 user fair share (1/0)
--       13 user max share (0 < s <= 1)  14 calls in flight while nothing is known
--       15 ms this call may still wait in process  16 ms an idle limiter's keys live
--       17 burst ms (LLM_RATE_LIMIT_BURST_SECONDS)  18 ms a shrunk burst takes to double
--       19 how much longer the interval is at least while the burst is shrunk
--          (STRICT_PACE_STRETCH; a margin learned from 429s, halved every ARGV 18 ms, may be more)
--       20 1: a limiter that starts pacing starts with a burst of one (slow start)
--       21 ms ahead a paced slot may be given to a call whose only wait it is
--          (LLM_RATE_LIMIT_PACE_AHEAD_SECONDS; ARGV 15 when that is more; none when ARGV 15 is 0)
-- Returns {status, ms, reason}: 1 admitted (start in ms: its paced slot); 0 wait ms in process
-- then ask again; 2 hold: come
-- back in ms (a job held before keeps its place; a new one queues behind its feature's line).

local DIMS = {'req', 'in', 'out'}
local NAMES = {req = 'requests', ['in'] = 'input_tokens', out = 'output_tokens', tok = 'tokens'}

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local id, job, feature, user = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local window_ms = tonumber(ARGV[10])
local max_wait = tonumber(ARGV[15])
-- A caller that may not wait at all (0) is given no slot ahead either.
local pace_ahead = max_wait
if max_wait > 0 then pace_ahead = math.max(max_wait, tonumber(ARGV[21]) or 0) end

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

-- Add (sign 1) or take away (sign -1) an entry's amounts: totals, its feature's, its user's.
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

-- Calls older than the window no longer count.
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - window_ms, 'LIMIT', 0, 1000)
for _, old in ipairs(expired) do
  local raw = redis.call('HGET', KEYS[2], old)
  if raw then
    local e = parse(raw)
    account(KEYS[3], e, -1)
    if e.flag == '1' then redis.call('HINCRBY', KEYS[3], 'open', -1) end
    redis.call('HDEL', KEYS[2], old)
  end
  redis.call('ZREM', KEYS[1], old)
end
-- Waiters that did not come back in time no longer hold anything.
local gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 1000)
for _, old in ipairs(gone) do
  local raw = redis.call('HGET', KEYS[5], old)
  if raw then
    account(KEYS[6], parse(raw), -1)
    redis.call('HDEL', KEYS[5], old)
  end
  redis.call('ZREM', KEYS[4], old)
end

-- The limit of each dimension: the smaller of the configured and the learned one.
local learned = redis.call('HMGET', KEYS[7], 'requests_limit', 'input_tokens_limit',
  'output_tokens_limit', 'tokens_limit', 'seen', 'burst', 'burst_at', 'margin')
local configured = {tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])}
local limit = {}
local any_configured = false
for i, d in ipairs(DIMS) do
  local c, l = configured[i], tonumber(learned[i])
  if c < 0 then c = nil else any_configured = true end
  if c and l then limit[d] = math.min(c, l) else limit[d] = c or l end
end
local tok_limit = tonumber(learned[4])
local bootstrap = (not any_configured) and (not learned[5])

local uv = redis.call('HMGET', KEYS[3], 'req', 'in', 'out', 'open')
local used = {req = tonumber(uv[1]) or 0, ['in'] = tonumber(uv[2]) or 0,
              out = tonumber(uv[3]) or 0}
local open = tonumber(uv[4]) or 0
local cost = {req = 1, ['in'] = tonumber(ARGV[5]), out = tonumber(ARGV[6])}
for _, d in ipairs(DIMS) do
  -- A call larger than a whole limit could never fit: it runs alone in an empty window.
  if limit[d] and cost[d] > limit[d] then cost[d] = limit[d] end
end
local tok_cost = cost['in'] + cost.out
if tok_limit and tok_cost > tok_limit then tok_cost = tok_limit end

-- What other features and users are waiting for right now.
local wf, wu = {}, {}
local ws = redis.call('HGETALL', KEYS[6])
for i = 1, #ws, 2 do
  local kind, name, d = string.match(ws[i], '^([fu])|(.+)|(%a+)$')
  if kind then
    local groups = (kind == 'f') and wf or wu
    groups[name] = groups[name] or {}
    groups[name][d] = tonumber(ws[i + 1])
  end
end
local weights = cjson.decode(ARGV[11])
local function feature_weight(name)
  local w = weights[name]
  if w == nil then return 1 end
  return tonumber(w)
end
local function one() return 1 end

-- Capacity held back for the waiting calls of other groups, up to each group's unused fair
-- share of the limit (shares weighted among the groups that want calls now). Work-conserving:
-- a group with nothing waiting holds nothing back, so its share goes to the others.
local function held_back(groups, self, prefix, weight_of)
  local held = {req = 0, ['in'] = 0, out = 0}
  local total = weight_of(self)
  for name, _ in pairs(groups) do
    if name ~= self then total = total + weight_of(name) end
  end
  if total <= 0 then return held, total end
  for name, sums in pairs(groups) do
    local w = weight_of(name)
    if name ~= self and w > 0 then
      local u = redis.call('HMGET', KEYS[3], prefix .. name .. '|req', prefix .. name .. '|in',
        prefix .. name .. '|out')
      for i, d in ipairs(DIMS) do
        local want = sums[d] or 0
        if limit[d] and want > 0 then
          local free = limit[d] * w / total - (tonumber(u[i]) or 0)
          if free > 0 then held[d] = held[d] + math.min(free, want) end
        end
      end
    end
  end
  return held, total
end

local held_f, total_weight = held_back(wf, feature, 'f|', feature_weight)
local held_u = {req = 0, ['in'] = 0, out = 0}
if ARGV[12] == '1' then held_u = held_back(wu, user, 'u|', one) end

local reason = nil
local excess = {}
for _, d in ipairs(DIMS) do
  if limit[d] then
    local held = math.max(held_f[d], held_u[d])
    local over = used[d] + cost[d] - (limit[d] - held)
    if over > 0 then
      excess[d] = over
      if reason == nil then
        if used[d] + cost[d] > limit[d] then reason = NAMES[d] else reason = 'share' end
      end
    end
  end
end
if tok_limit then
  local over = used['in'] + used.out + tok_cost - tok_limit
  if over > 0 then
    excess.tok = over
    reason = reason or 'tokens'
  end
end
local user_max_share = tonumber(ARGV[13])
local user_excess = {}
if user_max_share < 1 then
  local u = redis.call('HMGET', KEYS[3], 'u|' .. user .. '|req', 'u|' .. user .. '|in',
    'u|' .. user .. '|out')
  for i, d in ipairs(DIMS) do
    if limit[d] then
      local over = (tonumber(u[i]) or 0) + cost[d] - math.floor(limit[d] * user_max_share)
      if over > 0 then
        user_excess[d] = over
        reason = reason or 'user_max_share'
      end
    end
  end
end
if bootstrap and open >= tonumber(ARGV[14]) then reason = 'learning' end
-- Pacing: due at `tat` (never before now); a burst of b calls may start up to (b - 1)
-- intervals early. A learned short-interval burst doubles every ARGV 18 ms back to ARGV 17's,
-- and meanwhile the interval is longer by the learned margin (at least ARGV 19 - 1): strict
-- pacing has no burst to absorb the jitter between our admission and the provider's arrival
-- stamp. The margin doubles with each short-interval 429 paced under it (settle.lua) and halves
-- every period without one, so it grows to the jitter of a loaded host and no further.
local interval, tat, pace_over, strict, margin = nil, now, 0, 0, 0
if limit.req and limit.req > 0 then
  interval = window_ms / limit.req
  local burst = math.max(1, math.min(limit.req, math.floor(tonumber(ARGV[17]) / interval)))
  local shrunk, since = tonumber(learned[6]), tonumber(learned[7])
  if not (shrunk and since) and ARGV[20] == '1' then
    -- A limiter that starts pacing starts as if it had just learned a short interval: its
    -- burst must be earned, one doubling per period, each too far costing about one 429,
    -- rather than its first burst meeting a strict provider with many calls at once.
    shrunk, since = 1, now
    redis.call('HSET', KEYS[7], 'burst', 1, 'burst_at', int(now))
  end
  if shrunk and since then
    local periods = math.floor(math.max(0, now - since) / tonumber(ARGV[18]))
    local grown = shrunk * 2 ^ periods
    if grown < burst then
      burst = math.max(1, math.floor(grown))
      margin = math.max(tonumber(ARGV[19]) - 1, (tonumber(learned[8]) or 0) / 2 ^ periods)
      interval = interval * (1 + margin)
      -- 1: a burst of one as a fresh limiter starts (slow start); 2: a short interval learned
      -- from a 429 (settle.lua keeps its margin), under which sent.lua moves the slots after
      -- a late call.
      strict = 1
      if tonumber(learned[8]) then strict = 2 end
    end
  end
  local pace = redis.call('HMGET', KEYS[10], 'tat', 'interval')
  local due, was = tonumber(pace[1]), tonumber(pace[2])
  if due and was and was > 0 and due > now and was ~= interval then
    -- The limit changed (an admin edit, a new learned value): the calls already paced count
    -- at the new rate, so a raised limit takes effect at once and a lowered one at once too.
    due = now + (due - now) * interval / was
  end
  if due == nil then
    -- Pacing starts (the limit just became known): the calls already in the window count as
    -- if they had been paced from the oldest of them, and under strict pacing one slot more. They left together before the rate was known (the first calls of
    -- fresh workers, each opening its connection after our stamp: on a loaded host they
    -- reached the provider up to ~460 ms after it), so counting them from their stamps put
    -- the 11th call 4.7 s after the first to arrive, against a provider's any-5 s limit of
    -- 10, and its 429 cost 2 % of R for the rest of the run (bench/ratelimit.py).
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    if oldest[2] then due = tonumber(oldest[2]) + (used.req + math.min(strict, 1)) * interval else due = now end
  end
  tat = math.max(now, due)
  pace_over = tat - now - (burst - 1) * interval
  if pace_over > 0 and reason == nil then reason = 'pacing' end
end
local pause = tonumber(redis.call('GET', KEYS[8]) or '0') or 0
if pause > now then reason = 'paused' end

local idle_ms = ARGV[16]
local function keep_alive()
  for i = 1, 10 do redis.call('PEXPIRE', KEYS[i], idle_ms) end
end

local function unwait()
  local raw = redis.call('HGET', KEYS[5], job)
  if raw then
    account(KEYS[6], parse(raw), -1)
    redis.call('HDEL', KEYS[5], job)
    redis.call('ZREM', KEYS[4], job)
  end
end

-- A call whose only wait is its paced slot, due within ARGV 21 ms (or the wait it may still
-- make), is given that slot now (start in `ticket` ms): the threads waiting in process take
-- the next slots in turn instead of racing for each one, and a slot is not lost to the race's
-- losers. Held jobs come back through rq's scheduler, once a second: a horizon of a few
-- seconds keeps slots given out beyond the next return, so no slot passes with no call for it.
local ticket = 0
if reason == 'pacing' and pace_over <= pace_ahead then
  ticket = math.ceil(pace_over)
  reason = nil
end

if reason == nil then
  if redis.call('HEXISTS', KEYS[2], id) == 0 then
    redis.call('ZADD', KEYS[1], int(now + ticket), id)
    redis.call('HSET', KEYS[2], id, table.concat({1, int(cost['in']), int(cost.out), feature,
      user, 1}, ' '))
    account(KEYS[3], {req = 1, ['in'] = cost['in'], out = cost.out, feature = feature,
      user = user}, 1)
    redis.call('HINCRBY', KEYS[3], 'open', 1)
    if interval then
      redis.call('HSET', KEYS[10], 'tat', string.format('%.3f', tat + interval),
        'interval', string.format('%.3f', interval), 'strict', strict,
        'margin', string.format('%.4f', margin))
    end
  end
  unwait()
  redis.call('HSETNX', KEYS[3], 'since', int(now))
  keep_alive()
  return {1, ticket, 'admitted'}
end

-- Milliseconds until `need` of dimension d has left the window, oldest calls first (only the
-- given user's calls when `only_user` is set); the whole window when that is not known.
local function leaves(d, need, only_user)
  local freed, start = 0, 0
  while start < 2000 do
    local batch = redis.call('ZRANGE', KEYS[1], start, start + 199, 'WITHSCORES')
    if #batch == 0 then break end
    for i = 1, #batch, 2 do
      local raw = redis.call('HGET', KEYS[2], batch[i])
      if raw then
        local e = parse(raw)
        if only_user == nil or e.user == only_user then
          if d == 'tok' then freed = freed + e['in'] + e.out else freed = freed + e[d] end
          if freed >= need then
            return math.max(1, tonumber(batch[i + 1]) + window_ms - now)
          end
        end
      end
    end
    start = start + 200
  end
  return window_ms
end

-- The time one call of this feature takes of the limits at its fair share: the spacing of the
-- feature's line of held jobs, so they come back about when there is room for them.
local share = 1
if total_weight > 0 then share = math.max(feature_weight(feature) / total_weight, 0.01) end
local spacing = 10
for _, d in ipairs(DIMS) do
  if limit[d] and limit[d] > 0 then
    spacing = math.max(spacing, window_ms * cost[d] / (limit[d] * share))
  end
end

local wait = 0
if reason == 'paused' then
  wait = pause - now
elseif reason == 'learning' then
  wait = 200
else
  for d, over in pairs(excess) do
    local u = used[d]
    if d == 'tok' then u = used['in'] + used.out end
    -- More than the window holds: the room is held back for others' waiting calls; they take
    -- it within about one spacing.
    if over > u then wait = math.max(wait, spacing) else wait = math.max(wait, leaves(d, over)) end
  end
  for d, over in pairs(user_excess) do wait = math.max(wait, leaves(d, over, user)) end
  if pace_over > 0 then wait = math.max(wait, pace_over) end
end
wait = math.max(1, math.floor(wait))

local function register(until_ms, kind)
  local raw = redis.call('HGET', KEYS[5], job)
  if raw then account(KEYS[6], parse(raw), -1) end
  local e = {req = 1, ['in'] = cost['in'], out = cost.out, feature = feature, user = user}
  redis.call('HSET', KEYS[5], job, table.concat({1, int(e['in']), int(e.out), feature, user,
    kind}, ' '))
  account(KEYS[6], e, 1)
  redis.call('ZADD', KEYS[4], int(until_ms), job)
  redis.call('HSETNX', KEYS[3], 'since', int(now))
  keep_alive()
end

if wait <= max_wait then
  register(now + wait + 1000, 'w')
  return {0, wait, reason}
end

local previous = redis.call('HGET', KEYS[5], job)
local back = now + wait
-- After a pause every held job comes back at its end: the window then admits what fits, and
-- lines up the rest.
if reason ~= 'paused' and not (previous and string.sub(previous, -1) == 'h') then
  -- A job not held before queues behind its feature's line of held jobs.
  local line = tonumber(redis.call('HGET', KEYS[9], feature)) or 0
  if line > back then back = line end
  redis.call('HSET', KEYS[9], feature, int(back + spacing))
end
register(back + 5000 + (back - now) / 4, 'h')
return {2, back - now, reason}
