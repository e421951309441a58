-- Rolling back the claim columns' placeholders (V37): the four columns'
-- defaults back to NULL, and the schema history forgets V37 (a later
-- `tickler migrate` applies it again). Instant, at any time: a version
-- built before V37 claims, marks and releases rows holding placeholders
-- as it does rows holding NULL (docs/upgrades.md, "Claim columns that
-- never change size"). Rows keep the placeholders they hold.
ALTER TABLE jobs
    ALTER COLUMN claim_token SET DEFAULT NULL,
    ALTER COLUMN claimed_by SET DEFAULT NULL,
    ALTER COLUMN claimed_at SET DEFAULT NULL,
    ALTER COLUMN claim_expires_at SET DEFAULT NULL,
    ALGORITHM = INSTANT;
DELETE FROM refinery_schema_history WHERE version = 37;
