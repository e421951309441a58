-- Rolling back the hot path's one index (V34–V36), step 1 of 2: while the
-- new version still serves, rebuild the three indexes the versions before
-- V34 read. Built online (reads and writes go on; the statement fails
-- rather than lock the table where the server cannot). Then roll the old
-- binary out, and run rollback-status-at-2.sql (docs/upgrades.md,
-- "Upgrading a live deployment").
ALTER TABLE jobs
    ADD KEY ix_jobs_status_topic (status, topic),
    ADD KEY ix_jobs_live (live_at),
    ADD KEY ix_jobs_finished (finished_at),
    ALGORITHM = INPLACE, LOCK = NONE;
