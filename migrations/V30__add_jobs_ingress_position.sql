-- Kafka ingress (#26): where the last request that created or moved a job
-- was read, as `<partition>/<offset>/<topic>` (NULL for jobs the API or a
-- schedule made). A request read again after a crash, before its offset
-- was committed, is found at or before this position and changes nothing:
-- a create and a later move of one job, both read again, must not send
-- the job back to the create's time, not even for a moment. Added last
-- and nullable: instant on MariaDB 10.6+ and MySQL 8, nothing rewritten.
ALTER TABLE jobs ADD COLUMN ingress_position VARBINARY(300) NULL;
