-- The W3C trace context of the request that created a job, put on its Kafka
-- record as the `traceparent` header.
ALTER TABLE jobs ADD COLUMN trace_parent VARCHAR(55) CHARACTER SET ascii COLLATE ascii_bin NULL;
