-- Due-time watermarks (#45): per target topic, the instant T such that
-- every job due at or before T is produced, cancelled, expired or dead.
-- Written by the reconciler role's watermark service, which only ever
-- raises it (GREATEST), so it never goes back across instances or
-- failovers. A topic has a row once one of its jobs has fallen due.
CREATE TABLE topic_watermarks (
    topic        VARCHAR(249) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    watermark_at DATETIME(3) NOT NULL,
    updated_at   DATETIME(3) NOT NULL,
    PRIMARY KEY (topic)
) ENGINE = InnoDB;
