-- The call is leaving now: its reservation counts in the window from this moment (Redis' own
-- clock), so that the work done between the reservation and the request (the budget, the
-- claim) does not shift our window ahead of the provider's.
--
-- KEYS  1 window   ARGV  1 reservation id
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZADD', KEYS[1], 'XX', 'GT', string.format('%d', now), ARGV[1])
