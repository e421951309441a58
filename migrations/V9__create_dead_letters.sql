-- Outbox of dead-letter records still to produce. A row is written in the
-- same transaction that makes a job dead (when its topic has a dead-letter
-- topic), with the error it died of, and deleted once the record is
-- acknowledged by Kafka: a crash between the two produces the record late
-- or twice, never not at all. An instance producing a row claims it for a
-- while (claim_token, claimed_until), so instances do not produce one row
-- each; a row whose record failed waits for its claim to expire, and
-- `tries` counts the attempts.
CREATE TABLE dead_letters (
    job_id        BIGINT UNSIGNED NOT NULL,
    attempt       INT UNSIGNED NOT NULL,
    created_at    DATETIME(3) NOT NULL,
    error         TEXT NULL,
    claim_token   BIGINT UNSIGNED NULL,
    claimed_until DATETIME(3) NULL,
    tries         INT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, attempt),
    KEY ix_dead_letters_claim (claimed_until)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
