-- The hot path's indexes, part 2 (#24): indexes whose entries do not move
-- when a job's status changes, built online (concurrent reads and writes
-- go on; the statement fails rather than lock the table where the server
-- cannot). On a table of millions of rows this runs for minutes: its own
-- file, so an interrupted run leaves nothing half-applied. The indexes they
-- replace are dropped in V29, once no tickler reads them.
--
--   ix_jobs_live      loader, overdue probe, claims to settle, window count
--   ix_jobs_edited    rows changed since the loader's last pass (covering)
--   ix_jobs_finished  retention purge
--   ix_jobs_ack       ack deadlines (ack_deadline is set only while a job
--                     dispatched awaits its result)
--   ix_jobs_schedule  a schedule's occurrences (schedule_id never changes)
ALTER TABLE jobs
    ADD KEY ix_jobs_live (live_at),
    ADD KEY ix_jobs_edited (edited_at, schedule_time, created_at),
    ADD KEY ix_jobs_finished (finished_at),
    ADD KEY ix_jobs_ack (ack_deadline),
    ADD KEY ix_jobs_schedule (schedule_id),
    ALGORITHM = INPLACE, LOCK = NONE;
