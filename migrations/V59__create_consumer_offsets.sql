-- Known to be consumed (#59): the committed offsets of the consumer groups
-- that read tickler's topics, sampled (every consumption.interval_ms, by
-- every instance with the reconciler role) and kept only when a group's
-- offset on a partition moved on. A job's record at offset O of partition P
-- was consumed by group G at the first `seen_at` of G's offsets past O on
-- P that is no earlier than the job's `dispatched_at` (a topic deleted and
-- made again starts its offsets over).
--   committed_offset  the next offset the group will read (Kafka's meaning)
--   seen_at           when tickler first saw it, by the database's clock
-- Several instances may write the same sample: the key makes the second a
-- no-op. Purged with the finished jobs (jobs.retention_days).
CREATE TABLE consumer_offsets (
    topic            VARCHAR(249) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kafka_partition  INT NOT NULL,
    group_id         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    committed_offset BIGINT NOT NULL,
    seen_at          DATETIME(3) NOT NULL,
    PRIMARY KEY (topic, kafka_partition, group_id, committed_offset),
    -- A group's partitions and where it stands on each (`--unconsumed-by`).
    KEY ix_consumer_offsets_group (group_id, topic, kafka_partition, committed_offset),
    KEY ix_consumer_offsets_seen (seen_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
