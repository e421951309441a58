-- Rolling back the hot path's schema (V27–V29), step 1 of 2, while the new
-- binary still serves: the indexes the old binary reads, built online.
-- Then roll the old binary out, then run step 2 (docs/upgrades.md,
-- "Upgrading a live deployment").
ALTER TABLE jobs
    ADD KEY ix_jobs_status_schedule (status, schedule_time),
    ADD KEY ix_jobs_status_updated (status, updated_at, schedule_time, created_at),
    ADD KEY ix_jobs_status_ack (status, ack_deadline),
    ADD KEY ix_jobs_schedule_status (schedule_id, status),
    ALGORITHM = INPLACE, LOCK = NONE;
