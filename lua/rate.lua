-- rate.lua — one token's rate (requests or jobs a second) shared by every
-- instance: a GCRA bucket (one timestamp, `tat`) with a burst of one
-- second's worth, as the per-instance limiter it replaces. An instance asks
-- for what the request needs and, while there is room, a little more that
-- it spends locally before it asks again. Redis's clock decides.
--
-- KEYS[1]  the bucket: tat (ms since the epoch)
-- ARGV[1]  what the request needs
-- ARGV[2]  what to take if there is room (at least ARGV[1])
-- ARGV[3]  the rate, per second
--
-- Returns  {granted, retry_after_ms}: granted is 0 (and retry_after_ms how
--          long until the need fits) or between the need and the ask
local need, want, rate = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = 1000 / rate
local tat = tonumber(redis.call('HGET', KEYS[1], 'tat') or 0)
if tat < now then tat = now end
local allowed = math.floor((now + 1000 - tat) / interval + 1e-9)
if allowed < need then
  return {0, math.ceil(tat + need * interval - 1000 - now)}
end
local granted = math.min(want, allowed)
tat = tat + granted * interval
redis.call('HSET', KEYS[1], 'tat', tostring(tat))
redis.call('PEXPIRE', KEYS[1], math.ceil(tat - now) + 1000)
return {granted, 0}
