-- Retarget (#60): the pending jobs a bulk `retarget` left where they were
-- because a job on the target topic holds their key already (one job per
-- (topic, key)). Not errors of the operation, and not `skipped` (jobs no
-- longer pending when their batch came): counted apart, 0 for every other
-- action and every operation before this column.
ALTER TABLE bulk_ops ADD COLUMN conflicts BIGINT UNSIGNED NOT NULL DEFAULT 0;
