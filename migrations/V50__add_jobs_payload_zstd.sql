-- Payload compression at rest (#48): how a job's payload is stored.
-- NULL: as given (compression off, a short payload, a hand edit);
-- 0: zstd without a dictionary; N: zstd with `payload_dicts` N.
-- Instant: a column added at the end, NULL for every existing row.
ALTER TABLE jobs ADD COLUMN payload_zstd SMALLINT UNSIGNED NULL;
