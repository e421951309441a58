-- Payload schemas (#60): a pending job held back because its payload no
-- longer matched its topic's schema when it came due. `held_at` (NULL: not
-- held) keeps it from being claimed; `held_reason` says where the payload
-- failed. `schema_waived_attempt` is the attempt a forced release lets go
-- without the check (NULL: none). Nullable columns at the end: instant on
-- MariaDB 10.6+ and MySQL 8, nothing rewritten.
ALTER TABLE jobs
    ADD COLUMN held_at DATETIME(3) NULL,
    ADD COLUMN held_reason TEXT NULL,
    ADD COLUMN schema_waived_attempt INT UNSIGNED NULL;
