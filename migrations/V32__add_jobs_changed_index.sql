-- The loader's scan of changed rows, part 2: its index, built online
-- (concurrent reads and writes go on; the statement fails rather than lock
-- the table where the server cannot). Covering: the scan reads `id`,
-- `schedule_time` and `changed_at`. A job as created has no entry to move
-- when it is claimed or marked: its `changed_at` stays NULL throughout.
ALTER TABLE jobs
    ADD KEY ix_jobs_changed (changed_at, schedule_time),
    ALGORITHM = INPLACE, LOCK = NONE;
