-- Room in a waiting job's row for what its claim writes (#24). The claim
-- fills four columns that are NULL until then (`claim_token`,
-- `claimed_by`, `claimed_at`, `claim_expires_at`: 30 bytes); a row that
-- grows must be moved within its page, and a page filled by inserts in id
-- order has no room for every row on it to grow, so InnoDB splits it —
-- most of what a claim cost. A job is created holding 32 bytes here; the
-- claim empties it in the same statement, so the row does not grow and
-- stays where it is (the mark then shrinks it: the claim columns go back
-- to NULL as the positions arrive). The value means nothing; operators
-- leave it alone (an INSERT by hand gets the default). Added last with a
-- constant default: instant on MariaDB 10.6+ and MySQL 8, nothing
-- rewritten (rows older than this column have none, and grow as before).
ALTER TABLE jobs
    ADD COLUMN claim_room VARBINARY(32) NOT NULL DEFAULT '................................';
