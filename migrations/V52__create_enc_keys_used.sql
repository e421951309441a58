-- The encryption keys rows are sealed under (#48): every process that
-- seals notes its active key here at start and every few minutes, so
-- `tickler doctor` names a key the configuration lacks without reading
-- the table (a GROUP BY of a hundred million rows takes a minute).
-- `tickler keys rotate`, done with nothing skipped, forgets the others.
CREATE TABLE enc_keys_used (
    key_id   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    first_at DATETIME(3) NOT NULL,
    last_at  DATETIME(3) NOT NULL,
    PRIMARY KEY (key_id)
) ENGINE = InnoDB;
