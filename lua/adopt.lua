-- adopt.lua — a shard changes owner: every claim in its in-flight set is
-- the previous owner's, which will never release it (dead) or no longer
-- may (fenced off). Return them all to the due set at once, due now, so the
-- new owner's compare-and-set decides their fate without waiting for the
-- claim leases to expire.
--
-- KEYS[1]  due set of the shard       ZSET member=job id, score=due time (ms)
-- KEYS[2]  in-flight set of the shard ZSET member=job id, score=lease expiry (ms)
--
-- Returns  the number of ids moved
local due, inflight = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGE', inflight, 0, -1)
for _, id in ipairs(ids) do
  redis.call('ZADD', due, now, id)
end
redis.call('DEL', inflight)
return #ids
