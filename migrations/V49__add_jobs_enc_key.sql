-- Encryption at rest (#46): the key a row's payload and headers are sealed
-- under (AES-256-GCM, the row's id as associated data), by its id in
-- `encryption.keys`. NULL: stored plain (encryption off when the row was
-- written). Every other column stays plain and editable by hand.
ALTER TABLE jobs ADD COLUMN enc_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL;

-- `tickler keys rotate`'s progress toward one key: the jobs up to
-- `after_id` are sealed under `target_key` (or were skipped, unopenable),
-- so a rotation stopped midway resumes there.
CREATE TABLE key_rotation (
    target_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    after_id   BIGINT UNSIGNED NOT NULL DEFAULT 0,
    rewritten  BIGINT UNSIGNED NOT NULL DEFAULT 0,
    skipped    BIGINT UNSIGNED NOT NULL DEFAULT 0,
    updated_at DATETIME(3) NOT NULL,
    PRIMARY KEY (target_key)
) ENGINE = InnoDB;

-- A schedule's payload and headers (the template of its occurrences),
-- sealed the same way, with the schedule's id as associated data.
ALTER TABLE schedules ADD COLUMN enc_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL;
