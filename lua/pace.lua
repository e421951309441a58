-- pace.lua — paces one topic's dispatch across every instance: a token
-- bucket in the GCRA form (one timestamp, `tat`, the time the next job may
-- go at the topic's rate) that lets a burst of one tick through, and a
-- backlog horizon (`backlog`) after which the jobs refused now are spread,
-- in order, at the rate. Redis's clock decides.
--
-- KEYS[1]  the topic's pace hash: tat, backlog (ms since the epoch)
-- ARGV[1]  jobs asking to go now
-- ARGV[2]  the rate, jobs per second
-- ARGV[3]  the tick, ms: the burst let through at once (at least one job)
-- ARGV[4]  jobs that go now whatever the pace says (optional, 0): they
--          take their share of it first, so the others fill the gaps
--          (the deployment-wide smoothing of jobs with a window)
-- ARGV[5]  '1': keep no backlog (optional): the refused jobs are spread
--          from the next free instant, not after every job refused before
--          them, so a topic whose jobs are grouped serves the groups fairly
--          rather than first come, first served
-- ARGV[6]  ms added to Redis's clock (optional, 0): `tickler dev`'s
--          virtual clock
--
-- Returns  {granted, first backlog slot (ms)}; refused job i (from 0)
--          goes at slot + i * 1000 / rate
local key = KEYS[1]
local n, rate, tick = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local forced = tonumber(ARGV[4] or 0)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[6] or '0')
local interval = 1000 / rate
local tat = tonumber(redis.call('HGET', key, 'tat') or 0)
if tat < now then tat = now end
tat = tat + forced * interval
-- The burst is one tick, or one job when the rate is slower than a job a
-- tick (below 10/s with a 100 ms tick): else nothing would ever go.
local burst = math.max(tick, interval)
local allowed = math.floor((now + burst - tat) / interval)
if allowed < 0 then allowed = 0 end
local granted = math.min(n, allowed)
tat = tat + granted * interval
if ARGV[5] == '1' then
  redis.call('HSET', key, 'tat', tostring(tat))
  redis.call('PEXPIRE', key, math.max(math.ceil(tat - now), 0) + 60000)
  return {granted, math.floor(tat)}
end
local backlog = tonumber(redis.call('HGET', key, 'backlog') or 0)
local slot = math.max(backlog, tat)
local refused = n - granted
if refused > 0 then
  backlog = slot + refused * interval
end
redis.call('HSET', key, 'tat', tostring(tat), 'backlog', tostring(backlog))
redis.call('PEXPIRE', key, math.max(math.ceil(backlog - now), 0) + 60000)
return {granted, math.floor(slot)}
