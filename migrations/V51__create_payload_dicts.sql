-- zstd dictionaries trained on payloads (`tickler compression train`).
-- Never changed; deleted only while no row names it (`payload_zstd`).
-- The newest by `created_at` is the one new payloads are written with.
CREATE TABLE payload_dicts (
    id           SMALLINT UNSIGNED NOT NULL AUTO_INCREMENT,
    dict         MEDIUMBLOB NOT NULL,
    samples      INT UNSIGNED NOT NULL,
    sample_bytes BIGINT UNSIGNED NOT NULL,
    created_at   DATETIME(3) NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;
