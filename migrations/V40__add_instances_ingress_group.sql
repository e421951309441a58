-- The consumer group an instance reads the ingress's request topics for
-- (`ingress.group`), NULL when it has no request topics. The live instances
-- of one group share its partitions among themselves (#42): each knows from
-- these rows which partitions are its own, and a process restarted in place
-- takes its partitions back at once, rather than after a Kafka consumer
-- group's session timeout.
ALTER TABLE instances ADD COLUMN ingress_group VARCHAR(255) NULL;
