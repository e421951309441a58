-- claim.lua — take due job ids of one shard, moving them to the in-flight
-- set under a lease, so a dispatcher that dies cannot drop them.
--
-- Due-ness is decided by Redis's clock (TIME), never the caller's.
-- In-flight entries whose lease has expired go back to the due set first
-- (their dispatcher died or stalled); MySQL's compare-and-set decides
-- whether they are still to be produced.
--
-- KEYS[1]  due set of the shard       ZSET member=job id, score=due time (ms)
-- KEYS[2]  in-flight set of the shard ZSET member=job id, score=lease expiry (ms)
-- ARGV[1]  most ids to claim
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  lookahead in milliseconds: ids due up to now + this are taken
--          (the dispatcher holds them until their time; MySQL's
--          compare-and-set still refuses any not due within it by its clock)
-- ARGV[4]  ms added to Redis's clock (optional, 0): `tickler dev`'s
--          virtual clock, ahead of the real one
--
-- Returns  { now_ms, next_at_ms, requeued, id1, id2, ... }
--          now_ms:   Redis's clock, in ms since the epoch
--          next_at_ms:  when this shard next needs attention (earliest due
--                    score or lease expiry left), or -1 when empty
--          requeued: how many expired leases went back to the due set
local due, inflight = KEYS[1], KEYS[2]
local limit = tonumber(ARGV[1])
local lease_ms = tonumber(ARGV[2])
local lookahead_ms = tonumber(ARGV[3] or '0')

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[4] or '0')

local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  redis.call('ZREM', inflight, id)
  redis.call('ZADD', due, now, id)
end

local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now + lookahead_ms, 'LIMIT', 0, limit)
local result = { now, -1, #expired }
local deadline = now + lease_ms
for _, id in ipairs(ids) do
  redis.call('ZREM', due, id)
  redis.call('ZADD', inflight, deadline, id)
  result[#result + 1] = id
end

local next_at_ms = -1
local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
if head[2] then next_at_ms = tonumber(head[2]) end
local lease_head = redis.call('ZRANGE', inflight, 0, 0, 'WITHSCORES')
if lease_head[2] and (next_at_ms == -1 or tonumber(lease_head[2]) < next_at_ms) then
  next_at_ms = tonumber(lease_head[2])
end
result[2] = next_at_ms
return result
