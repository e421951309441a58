-- One value sealed under each key id by the first process that held it
-- (#57): a process whose key of that id does not open it (a wrong key
-- file under the right id) refuses to start, naming the key, before it
-- seals or opens a job.
CREATE TABLE enc_key_canaries (
    key_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    sealed     VARBINARY(255) NOT NULL,
    created_at DATETIME(3) NOT NULL,
    PRIMARY KEY (key_id)
) ENGINE = InnoDB;
