-- The hot path's indexes, part 3 (#24): the status-led indexes V28
-- replaced. Each had an entry rewritten at every claim and every mark. A
-- deployment upgraded while running applies V27 and V28 first (`tickler
-- migrate --to 28`), rolls the new binary out, then applies this one (see
-- docs/operations.md, "Upgrading a live deployment"). ix_jobs_status_topic
-- stays: the gauges of jobs by status and topic read it.
ALTER TABLE jobs
    DROP KEY ix_jobs_status_schedule,
    DROP KEY ix_jobs_status_updated,
    DROP KEY ix_jobs_status_ack,
    DROP KEY ix_jobs_schedule_status,
    ALGORITHM = INPLACE, LOCK = NONE;
