-- The hot path's indexes, part 1 (#24): three virtual columns, each NULL
-- outside the states it serves, so that an index on it is not rewritten
-- when a job moves between states it does not tell apart. Virtual, never
-- stored: adding them rewrites nothing (instant on MariaDB 10.6+ and
-- MySQL 8). Read-only for operators: the server computes them.
--
--   live_at      schedule_time while pending or dispatching: the claim
--                (pending → dispatching) leaves its entry where it is
--   edited_at    updated_at while pending or dispatching (the claim keeps
--                updated_at): the loader's scan for rows changed by hand
--   finished_at  updated_at once a job is done with (succeeded, dead,
--                cancelled, or dispatched and expecting no result): purge
ALTER TABLE jobs
    ADD COLUMN live_at DATETIME(3)
        AS (IF(status IN ('pending', 'dispatching'), schedule_time, NULL)) VIRTUAL,
    ADD COLUMN edited_at DATETIME(3)
        AS (IF(status IN ('pending', 'dispatching'), updated_at, NULL)) VIRTUAL,
    ADD COLUMN finished_at DATETIME(3)
        AS (IF(status IN ('succeeded', 'dead', 'cancelled')
               OR (status = 'dispatched' AND ack_deadline IS NULL), updated_at, NULL)) VIRTUAL;
