-- Proof of delivery (#59): when the dispatcher read a job's record back at
-- the position the broker acknowledged it at (`kafka_partition`,
-- `kafka_offset`) and found it there, by the database's clock. NULL: not
-- verified (not yet, `dispatcher.verify` left it out, or it was dispatched
-- before this column). A record not found there is produced again as the
-- next attempt, and the column is cleared with the position.
--
-- Setting it keeps `updated_at` (and so `status_at`): verifying a job is no
-- change of the job's.
ALTER TABLE jobs ADD COLUMN verified_at DATETIME(3) NULL;
