-- refeed.lua — put back ids that MySQL says are pending and due but that
-- the index has lost (a Redis flush or restart, a write that never landed).
-- An id already in the due set or in flight is left alone, so a live claim
-- is never duplicated.
--
-- KEYS[1]  due set of the shard       ZSET member=job id, score=due time (ms)
-- KEYS[2]  in-flight set of the shard ZSET member=job id, score=lease expiry (ms)
-- ARGV     pairs: job id, due time in ms since the epoch
--
-- Returns  the number of ids added back
local due, inflight = KEYS[1], KEYS[2]
local added = 0
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if not redis.call('ZSCORE', due, id) and not redis.call('ZSCORE', inflight, id) then
    redis.call('ZADD', due, ARGV[i + 1], id)
    added = added + 1
  end
end
return added
