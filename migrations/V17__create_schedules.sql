-- Recurring schedules (POST /v1/schedules). Each occurrence becomes an
-- ordinary row of `jobs`, created ahead of time with the key
-- '<schedule_key>@<occurrence instant, RFC 3339 UTC ms>' and `schedule_id`
-- set, so the unique (topic, job_key) index makes creating one twice
-- impossible, whichever instance tries.
--
--   cron, time_zone   a 5- or 6-field cron expression read in an IANA zone
--   every_ms          or a fixed period, counted from start_at
--   start_at, end_at  occurrences fall within [start_at, end_at]
--   max_occurrences   stop after creating this many
--   misfire           what to do with occurrences whose time passed while no
--                     tickler ran: skip | fire_once | fire_all
--   misfire_grace_ms  how late an occurrence may be and still count as on time
--   cursor_at         every occurrence at or before it is decided (created,
--                     or skipped as a misfire); the next is the first after it
--   next_at           that next occurrence; NULL once the schedule has ended
--   last_at           the latest occurrence created (the materializer works
--                     on a schedule when it comes within its lookahead)
--   occurrences       how many occurrences were created
CREATE TABLE schedules (
    id               BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    topic            VARCHAR(249) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    schedule_key     VARBINARY(1020) NOT NULL,
    payload          MEDIUMBLOB NOT NULL,
    payload_kind     ENUM('json', 'bytes') NOT NULL DEFAULT 'bytes',
    headers          TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    expects_result   BOOLEAN NOT NULL DEFAULT FALSE,
    max_attempts     INT UNSIGNED NOT NULL DEFAULT 1,
    backoff_base_ms  INT UNSIGNED NOT NULL DEFAULT 1000,
    backoff_cap_ms   INT UNSIGNED NOT NULL DEFAULT 3600000,
    ack_timeout_ms   INT UNSIGNED NOT NULL DEFAULT 300000,
    cron             VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NULL,
    time_zone        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    every_ms         BIGINT UNSIGNED NULL,
    start_at         DATETIME(3) NOT NULL,
    end_at           DATETIME(3) NULL,
    max_occurrences  INT UNSIGNED NULL,
    misfire          ENUM('skip', 'fire_once', 'fire_all') NOT NULL DEFAULT 'fire_once',
    misfire_grace_ms INT UNSIGNED NOT NULL DEFAULT 60000,
    status           ENUM('active', 'paused', 'ended') NOT NULL DEFAULT 'active',
    version          INT UNSIGNED NOT NULL DEFAULT 1,
    cursor_at        DATETIME(3) NOT NULL,
    next_at          DATETIME(3) NULL,
    last_at          DATETIME(3) NULL,
    occurrences      INT UNSIGNED NOT NULL DEFAULT 0,
    created_by       VARCHAR(110) NOT NULL,
    created_at       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    updated_at       DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    PRIMARY KEY (id),
    UNIQUE KEY uq_schedules_topic_key (topic, schedule_key),
    -- Serves the materializer: active schedules whose latest occurrence is
    -- within the lookahead.
    KEY ix_schedules_status_last (status, last_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
