-- What a job expects after it is produced (issue 5), fixed when it is
-- created from the request, the topic's configuration or the defaults:
--   expects_result   whether a consumer reports back; without, the job is
--                    finished once dispatched
--   backoff_*_ms     retry delay: min(cap, base * 2^(attempt-1)), jittered
--                    to between half of that and all of it
--   ack_timeout_ms   how long a dispatched job waits for its result before
--                    silence counts as a retry
--   ack_deadline     set when a job expecting a result is dispatched (the
--                    database's clock); the reconciler scans it by the index
-- One statement, so the change applies whole or not at all.
ALTER TABLE jobs
    ADD COLUMN expects_result  BOOLEAN NOT NULL DEFAULT FALSE,
    ADD COLUMN backoff_base_ms INT UNSIGNED NOT NULL DEFAULT 1000,
    ADD COLUMN backoff_cap_ms  INT UNSIGNED NOT NULL DEFAULT 3600000,
    ADD COLUMN ack_timeout_ms  INT UNSIGNED NOT NULL DEFAULT 300000,
    ADD COLUMN ack_deadline    DATETIME(3) NULL,
    ADD KEY ix_jobs_status_ack (status, ack_deadline);
