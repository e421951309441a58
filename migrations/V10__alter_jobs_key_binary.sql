-- A key is an idempotency key and a Kafka record key: it must match byte
-- for byte. utf8mb4_bin pads trailing spaces on MariaDB ('k' = 'k '), and
-- MySQL 8's no-pad binary collation does not exist on MariaDB, so the key is
-- stored as bytes (UTF-8, checked by tickler): 255 characters of up to four
-- bytes. The unique (topic, job_key) index now tells 'k' and 'k ' apart.
-- Reading it by hand: CAST(job_key AS CHAR) (MySQL 8's client shows
-- binary columns as hex unless started with --skip-binary-as-hex).
ALTER TABLE jobs MODIFY job_key VARBINARY(1020) NULL;
