-- Rolling back the loader's scan of changed rows (V31–V33), step 2 of 2:
-- once only the old version serves, drop what V31 and V32 added and make
-- the schema history forget V31–V33 (a later `tickler migrate` applies
-- them again).
ALTER TABLE jobs
    DROP KEY ix_jobs_changed,
    DROP COLUMN changed_at,
    ALGORITHM = INPLACE, LOCK = NONE;
DELETE FROM refinery_schema_history WHERE version IN (31, 32, 33);
