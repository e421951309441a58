-- The keys rows were sealed under before V52 (encryption at rest came
-- with V49): read once from the rows, a full read of `jobs` and
-- `schedules` (seconds a ten million rows). An empty table when
-- encryption was never on.
INSERT INTO enc_keys_used (key_id, first_at, last_at)
SELECT enc_key, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3) FROM (
    SELECT DISTINCT enc_key FROM jobs WHERE enc_key IS NOT NULL
    UNION SELECT DISTINCT enc_key FROM schedules WHERE enc_key IS NOT NULL
) k;
