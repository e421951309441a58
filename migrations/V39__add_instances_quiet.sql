-- How long after an instance is taken for dead nothing of its claims can
-- still become visible on Kafka: its own `kafka_message_timeout_ms` plus
-- `doubt_margin_ms`. Its claims are put in doubt for this long before their
-- topics are read back, by whichever instance rescues them (#42). NULL for
-- rows of older versions: the rescuer's own settings then.
ALTER TABLE instances ADD COLUMN quiet_ms INT UNSIGNED NULL;
