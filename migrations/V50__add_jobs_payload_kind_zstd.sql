-- Payload compression at rest (#48): a compressed payload's kind is
-- `json+zstd` or `bytes+zstd` (its bytes: the dictionary's id, 2 bytes
-- big-endian, 0 for none, then a zstd frame); `json` and `bytes` are as
-- given (compression off, a short payload, a hand edit). Members added at
-- the end of the ENUM: an instant change on MySQL 8 and MariaDB, where a
-- new column would rebuild `jobs` on MariaDB with its writes blocked
-- (its indexed virtual columns forbid an instant or online ADD COLUMN).
ALTER TABLE jobs MODIFY COLUMN payload_kind ENUM('json', 'bytes', 'json+zstd', 'bytes+zstd') NOT NULL DEFAULT 'bytes';
