-- The process-id namespace of an instance (Linux: /proc/self/ns/pid), so
-- that a process restarted on the same host can tell that its predecessor
-- (same host, same namespace, its pid gone) is dead and take over its
-- shards at once instead of after instance_ttl_ms. NULL where unknown; two
-- containers sharing a hostname never judge each other by it.
ALTER TABLE instances ADD COLUMN pid_namespace VARCHAR(64) NULL;
