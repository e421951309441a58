-- Rolling back the hot path's schema (V27–V29), step 2 of 2, once only the
-- old binary serves: the new indexes and columns go, and the schema history
-- forgets V27–V29, so a later `tickler migrate` applies them again.
ALTER TABLE jobs
    DROP KEY ix_jobs_live,
    DROP KEY ix_jobs_edited,
    DROP KEY ix_jobs_finished,
    DROP KEY ix_jobs_ack,
    DROP KEY ix_jobs_schedule,
    ALGORITHM = INPLACE, LOCK = NONE;
ALTER TABLE jobs DROP COLUMN live_at, DROP COLUMN edited_at, DROP COLUMN finished_at;
DELETE FROM refinery_schema_history WHERE version IN (27, 28, 29);
