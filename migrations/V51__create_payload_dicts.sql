-- zstd dictionaries trained on payloads (`tickler compression train`).
-- Never changed, and never deleted while a row is compressed with it (a
-- compressed payload starts with its dictionary's id).
-- The newest by `created_at` is the one new payloads are written with.
CREATE TABLE payload_dicts (
    id           SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT,
    dict         MEDIUMBLOB NOT NULL,
    samples      INT UNSIGNED NOT NULL,
    sample_bytes BIGINT UNSIGNED NOT NULL,
    created_at   DATETIME(3) NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;
