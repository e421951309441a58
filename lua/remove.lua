-- remove.lua — forget ids of one shard entirely: from the due set and from
-- the in-flight set (a job dispatched, cancelled, or no longer pending).
--
-- KEYS[1]  due set of the shard       ZSET member=job id, score=due time (ms)
-- KEYS[2]  in-flight set of the shard ZSET member=job id, score=lease expiry (ms)
-- ARGV     job ids
--
-- Returns  the number of entries removed from either set
local removed = 0
for i = 1, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  removed = removed + redis.call('ZREM', KEYS[2], ARGV[i])
end
return removed
