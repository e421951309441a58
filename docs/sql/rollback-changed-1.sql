-- Rolling back the loader's scan of changed rows (V31–V33), step 1 of 2:
-- while the new version still serves, put back the column and the index
-- the versions before V31 read. The index is built online (reads and
-- writes go on; the statement fails rather than lock the table where the
-- server cannot). Then roll the old binary out, and run
-- rollback-changed-2.sql (docs/upgrades.md, "Upgrading a live
-- deployment").
ALTER TABLE jobs
    ADD COLUMN edited_at DATETIME(3)
        AS (IF(status IN ('pending', 'dispatching'), updated_at, NULL)) VIRTUAL;
ALTER TABLE jobs
    ADD KEY ix_jobs_edited (edited_at, schedule_time, created_at),
    ALGORITHM = INPLACE, LOCK = NONE;
