-- How long each instance's heartbeat may go silent before the others take
-- it for dead: its own `instance_ttl_ms`. The others judge it by this, not
-- by theirs, so an instance never stops trusting its heartbeat later than
-- the others take it for dead, whatever a rolling change of the setting
-- leaves them with (#42). NULL for rows of older versions: the judge's own
-- setting then.
ALTER TABLE instances ADD COLUMN ttl_ms INT UNSIGNED NULL;
