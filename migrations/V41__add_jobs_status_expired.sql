-- The status `expired` (#45): a job still pending at its `expires_at` (set
-- on create, or a `skip` schedule's occurrence past its misfire grace) is
-- never produced and ends here, rather than `cancelled`. Appended last, so
-- MySQL 8 and MariaDB change the column in place, instantly.
ALTER TABLE jobs
    MODIFY COLUMN status ENUM('pending', 'dispatching', 'dispatched', 'succeeded', 'dead', 'cancelled', 'expired') NOT NULL DEFAULT 'pending';
