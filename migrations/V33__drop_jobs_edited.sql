-- The loader's scan of changed rows, part 3: `edited_at` (V27) and its
-- index, which V31 and V32 replace. Every create added an entry to it and
-- every mark of a pending job took one away. A deployment upgraded while
-- running applies V31 and V32 first (`tickler migrate --to 32`), rolls the
-- new binary out, then applies this one (docs/operations.md, "Upgrading a
-- live deployment").
ALTER TABLE jobs
    DROP KEY ix_jobs_edited,
    DROP COLUMN edited_at,
    ALGORITHM = INPLACE, LOCK = NONE;
