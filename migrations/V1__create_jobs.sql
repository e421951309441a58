-- The jobs table is tickler's source of truth. Column names are part of the
-- product (operators write SQL against them): add freely, rename never.
--
-- Times are DATETIME(3) in UTC. tickler forces its sessions to time_zone
-- '+00:00'; operators editing by hand should do the same (docs/operations.md).
CREATE TABLE jobs (
    id               BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    topic            VARCHAR(249) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    job_key          VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    payload          MEDIUMBLOB NOT NULL,
    payload_kind     ENUM('json', 'bytes') NOT NULL DEFAULT 'bytes',
    headers          TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    schedule_time    DATETIME(3) NOT NULL,
    status           ENUM('pending', 'dispatching', 'dispatched', 'succeeded', 'dead', 'cancelled') NOT NULL DEFAULT 'pending',
    attempt          INT UNSIGNED NOT NULL DEFAULT 1,
    max_attempts     INT UNSIGNED NOT NULL DEFAULT 1,
    version          INT UNSIGNED NOT NULL DEFAULT 1,
    claim_token      BIGINT UNSIGNED NULL,
    claim_expires_at DATETIME(3) NULL,
    created_at       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    dispatched_at    DATETIME(3) NULL,
    kafka_partition  INT NULL,
    kafka_offset     BIGINT NULL,
    last_error       TEXT NULL,
    PRIMARY KEY (id),
    -- Idempotent create: one job per (topic, key). NULL keys never collide.
    UNIQUE KEY uq_jobs_topic_key (topic, job_key),
    -- Serves the loader (pending jobs entering the window) and the overdue
    -- probe (pending jobs already due) as range scans that never touch
    -- far-future rows, and the stuck-claim scan (status = 'dispatching').
    KEY ix_jobs_status_schedule (status, schedule_time),
    -- Serves the scan for rows edited by hand.
    KEY ix_jobs_updated_at (updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
