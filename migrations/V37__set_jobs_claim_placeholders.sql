-- Claim columns that never change size (#24). The claim fills four
-- columns (`claim_token`, `claimed_by`, `claimed_at`, `claim_expires_at`:
-- 30 bytes) that were NULL until then, and a row that grows must be moved;
-- a page filled by inserts in id order has no room for every row on it to
-- grow, so when the jobs on it are claimed InnoDB splits it — most of what
-- a claim cost. A job is now created holding placeholders there (0, 0 and
-- 1970-01-01 00:00:00.000, the column defaults set here), which the claim
-- overwrites in place; releases put them back. The mark still sets the
-- four to NULL: the 30 bytes they free make room for the position it
-- writes (`dispatched_at`, `kafka_partition`, `kafka_offset`), so the mark
-- does not grow the row either. Placeholders mean "no claim", as NULL
-- does: no instance has id 0, no claim has token 0, and a lease that ended
-- in 1970 has ended. Rows created before this keep their NULLs and are
-- claimed as before. Changing a default changes the table's metadata
-- only: instant on MariaDB 10.6+, MySQL 8 and TiDB.
ALTER TABLE jobs
    ALTER COLUMN claim_token SET DEFAULT 0,
    ALTER COLUMN claimed_by SET DEFAULT 0,
    ALTER COLUMN claimed_at SET DEFAULT '1970-01-01 00:00:00.000',
    ALTER COLUMN claim_expires_at SET DEFAULT '1970-01-01 00:00:00.000',
    ALGORITHM = INSTANT;
