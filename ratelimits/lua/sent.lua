-- The call is leaving now: its reservation counts in the window from this moment (Redis' own
-- clock), so that the work done between the reservation and the request (the budget, the
-- claim) does not shift our window ahead of the provider's. Returns the ms left of the pause
-- every worker is under (0: none): a call given its paced slot before a 429 waits it out.
--
-- KEYS  1 window  2 pause   ARGV  1 reservation id
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pause = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if pause > now then return math.floor(pause - now) end
redis.call('ZADD', KEYS[1], 'XX', 'GT', string.format('%d', now), ARGV[1])
return 0
