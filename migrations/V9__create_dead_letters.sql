-- Outbox of dead-letter records still to produce. A row is written in the
-- same transaction that makes a job dead (when its topic has a dead-letter
-- topic), and deleted once the record is acknowledged by Kafka, so a crash
-- between the two produces the record late or twice, never not at all.
CREATE TABLE dead_letters (
    job_id     BIGINT UNSIGNED NOT NULL,
    attempt    INT UNSIGNED NOT NULL,
    created_at DATETIME(3) NOT NULL,
    PRIMARY KEY (job_id, attempt)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
