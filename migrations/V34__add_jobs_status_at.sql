-- One index for the hot path, part 1 (#24): a virtual column that orders
-- a job within its status — `schedule_time` while pending or dispatching,
-- `updated_at` once the job is done with (succeeded, dead, cancelled, or
-- dispatched and expecting no result), NULL while a dispatched job awaits
-- its result (`ack_deadline` has its own index). V35 indexes it after
-- `status`, in place of three indexes a dispatched job moved four entries
-- in: `(status, topic)` at the claim and the mark, `live_at` and
-- `finished_at` at the mark. Virtual, never stored: adding it rewrites
-- nothing (instant on MariaDB 10.6+ and MySQL 8). Read-only for
-- operators: the server computes it.
ALTER TABLE jobs
    ADD COLUMN status_at DATETIME(3)
        AS (CASE WHEN status IN ('pending', 'dispatching') THEN schedule_time
                 WHEN status = 'dispatched' AND ack_deadline IS NOT NULL THEN NULL
                 ELSE updated_at END) VIRTUAL;
