-- requeue.lua — give claimed ids back to the due set of their shard, at the
-- given times (a claim that could not be produced, or an id MySQL says is
-- not due yet).
--
-- KEYS[1]  due set of the shard       ZSET member=job id, score=due time (ms)
-- KEYS[2]  in-flight set of the shard ZSET member=job id, score=lease expiry (ms)
-- ARGV     pairs: job id, due time in ms since the epoch
--
-- Returns  the number of ids moved
local due, inflight = KEYS[1], KEYS[2]
local moved = 0
for i = 1, #ARGV, 2 do
  redis.call('ZREM', inflight, ARGV[i])
  redis.call('ZADD', due, ARGV[i + 1], ARGV[i])
  moved = moved + 1
end
return moved
