-- Per-topic controls (POST /v1/topics/{topic}/pause|resume,
-- PATCH /v1/topics/{topic}); a topic without a row runs freely.
--   paused          due jobs of the topic stay pending: the dispatcher's
--                   compare-and-set refuses them while this is set
--   max_per_second  pace of dispatch across every instance (NULL: the
--                   configuration's `topics.<name>.max_per_second`, or none)
-- Operators may edit it by hand; every instance reads it every second.
CREATE TABLE topic_controls (
    topic          VARCHAR(249) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    paused         BOOLEAN NOT NULL DEFAULT FALSE,
    max_per_second INT UNSIGNED NULL,
    updated_by     VARCHAR(110) NOT NULL DEFAULT 'sql',
    updated_at     DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
    PRIMARY KEY (topic),
    KEY ix_topic_controls_paused (paused)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
