-- The call is leaving now: its reservation counts in the window from this moment (Redis' own
-- clock), so that the work done between the reservation and the request (the budget, the
-- claim) does not shift our window ahead of the provider's. A call given a paced slot that has
-- not come yet (moved behind a pause by settle.lua), or under a pause, is not stamped: the ms
-- to wait are returned instead, and it asks again then. Returns 0 once stamped.
--
-- Under strict pacing learned from a 429 (strict 2: a short interval enforced) a call leaving
-- later than its slot by more than ARGV 2 ms (what the stretched interval absorbs at the
-- first margin, ARGV 3; in proportion to a larger learned margin; a slow budget or claim), or
-- under a fresh limiter's slow start (strict 1: nothing yet says the provider counts short
-- intervals) by more than ARGV 4 ms (what the margin absorbs over the burst's seconds: moving
-- slots for every call 40 ms late there cost 2 to 5 % of R on a loaded host against a plain
-- window, while a fresh worker's first calls, 300-600 ms late, still met a provider's 5 s
-- interval unless they moved the slots after them) would come
-- closer to the next ones than the provider's interval allows: the slots given after it that
-- are now too close move back, the first one interval after its send less the lateness
-- absorbed (so it keeps the spacing a call late by just that much keeps: moving by all of the
-- lateness lost the absorbed part again at every late call, 1-2 % of R on a loaded host), each
-- next one interval after the one before, and the next slot to
-- give is at least one interval after the last of them. Slots already far enough ahead stay:
-- moving every slot, and the pace, by each late call's lateness added the lateness of calls
-- that left together (a loaded host: hundreds of late calls a second) and pushed the pace
-- hundreds of seconds ahead of the rate, holding every job that long (the drill of 2026-12-03).
--
-- KEYS  1 window  2 pause  3 pace
-- ARGV  1 reservation id  2 lateness absorbed (ms) at margin ARGV 3 (a fraction)
--       4 lateness absorbed (ms) under the slow start
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local slot = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if slot and slot > now + 2 then return math.floor(slot - now) end
local pause = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if pause > now then return math.floor(pause - now) end
local pace = redis.call('HMGET', KEYS[3], 'strict', 'margin')
local base = tonumber(ARGV[3])
local tolerance = tonumber(ARGV[2]) * math.max(1, (tonumber(pace[2]) or base) / base)
if pace[1] == '1' then tolerance = math.max(tolerance, tonumber(ARGV[4])) end
if slot and now - slot > tolerance and (pace[1] == '1' or pace[1] == '2') then
  local interval = tonumber(redis.call('HGET', KEYS[3], 'interval')) or 0
  local next_free = now - tolerance + interval
  local ahead = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf',
    'WITHSCORES')
  for i = 1, #ahead, 2 do
    local score = tonumber(ahead[i + 1])
    if score < next_free then
      redis.call('ZADD', KEYS[1], string.format('%d', math.ceil(next_free)), ahead[i])
      score = next_free
    end
    next_free = score + interval
  end
  local due = tonumber(redis.call('HGET', KEYS[3], 'tat') or '0') or 0
  if next_free > due then
    redis.call('HSET', KEYS[3], 'tat', string.format('%.3f', next_free))
  end
end
redis.call('ZADD', KEYS[1], 'XX', 'GT', string.format('%d', now), ARGV[1])
return 0
