-- Every state change of a job, with who made it: api, dispatcher,
-- reconciler, or sql for changes made by hand. Written by triggers on jobs
-- (V3, V4), so hand edits are recorded too.
CREATE TABLE job_events (
    id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    job_id        BIGINT UNSIGNED NOT NULL,
    at            DATETIME(3) NOT NULL,
    actor         VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status        ENUM('pending', 'dispatching', 'dispatched', 'succeeded', 'dead', 'cancelled') NOT NULL,
    schedule_time DATETIME(3) NOT NULL,
    attempt       INT UNSIGNED NOT NULL,
    PRIMARY KEY (id),
    KEY ix_job_events_job (job_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
