-- The loader's scan of rows changed since its last pass, part 1: a
-- virtual column that is `updated_at` only for a pending or dispatching
-- job changed after it was created (rescheduled, released, retried, edited
-- by hand), and NULL for every job as it was inserted. `edited_at` (V27)
-- held `updated_at` for every pending job, so the scan's range — rows
-- changed in the last pass and its ten-second overlap — also held every
-- job created meanwhile, each read and thrown away (`edited_at >
-- created_at`): at 40,000 creates a second, 400,000 index entries a pass.
-- Virtual, never stored: adding it rewrites nothing (instant on MariaDB
-- 10.6+ and MySQL 8). V32 indexes it; V33 drops `edited_at` and its index
-- once no tickler reads them (docs/operations.md, "Upgrading a live
-- deployment").
ALTER TABLE jobs
    ADD COLUMN changed_at DATETIME(3)
        AS (IF(status IN ('pending', 'dispatching') AND updated_at > created_at,
               updated_at, NULL)) VIRTUAL;
