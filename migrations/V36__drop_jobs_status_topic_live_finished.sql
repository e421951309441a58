-- One index for the hot path, part 3: the indexes V35 replaces. A
-- deployment upgraded while running applies V34 and V35 first (`tickler
-- migrate --to 35`), rolls the new binary out, then applies this one
-- (docs/operations.md, "Upgrading a live deployment"). The columns
-- `live_at` and `finished_at` stay, unindexed, for queries by hand.
ALTER TABLE jobs
    DROP KEY ix_jobs_status_topic,
    DROP KEY ix_jobs_live,
    DROP KEY ix_jobs_finished,
    ALGORITHM = INPLACE, LOCK = NONE;
