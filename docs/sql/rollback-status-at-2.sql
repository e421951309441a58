-- Rolling back the hot path's one index (V34–V36), step 2 of 2: once only
-- the old version serves, drop what V34 and V35 added and make the schema
-- history forget V34–V36 (a later `tickler migrate` applies them again).
ALTER TABLE jobs
    DROP KEY ix_jobs_status_at,
    DROP COLUMN status_at,
    ALGORITHM = INPLACE, LOCK = NONE;
DELETE FROM refinery_schema_history WHERE version IN (34, 35, 36);
