-- Instances know each other. Every tickler process registers a row and
-- beats its heart on the database's clock; a row whose heartbeat is older
-- than `instance_ttl_ms` is an instance dead for everyone. Rows of
-- instances gone for a day are deleted.
CREATE TABLE instances (
    id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    host         VARCHAR(255) NOT NULL,
    pid          INT UNSIGNED NOT NULL,
    version      VARCHAR(64) NOT NULL,
    roles        VARCHAR(200) NOT NULL,
    started_at   DATETIME(3) NOT NULL,
    heartbeat_at DATETIME(3) NOT NULL,
    PRIMARY KEY (id),
    KEY ix_instances_heartbeat (heartbeat_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;

-- One row per logical shard: its count is the deployment's shard count
-- (`tickler shards resize` adds rows). `owner` is the instance that alone
-- claims the shard's due jobs; `epoch` grows with every change of owner, and
-- the dispatcher's compare-and-set on `jobs` requires the epoch it holds,
-- so an owner that lost the shard while paused wins nothing when it wakes.
CREATE TABLE shard_leases (
    shard       INT UNSIGNED NOT NULL,
    owner       BIGINT UNSIGNED NULL,
    epoch       BIGINT UNSIGNED NOT NULL DEFAULT 0,
    acquired_at DATETIME(3) NULL,
    PRIMARY KEY (shard)
) ENGINE = InnoDB;

-- The instance whose dispatcher holds a `dispatching` row: when that
-- instance dies, its rows are rescued at once, not after the claim lease.
ALTER TABLE jobs ADD COLUMN claimed_by BIGINT UNSIGNED NULL;
