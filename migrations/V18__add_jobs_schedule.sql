-- Occurrences of a schedule (V17) are jobs with `schedule_id` set.
--   expires_at  a job still pending at this time is not produced but
--               cancelled (last_error says why): a `skip` schedule's
--               occurrence that tickler could not produce within the
--               schedule's misfire grace
-- One statement, so the change applies whole or not at all.
ALTER TABLE jobs
    ADD COLUMN schedule_id BIGINT UNSIGNED NULL,
    ADD COLUMN expires_at  DATETIME(3) NULL,
    ADD KEY ix_jobs_schedule_status (schedule_id, status);
