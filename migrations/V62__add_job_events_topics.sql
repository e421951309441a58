-- Retarget (#60): a job's history names the topics a change moved it
-- between. Both NULL for every other change (and every row before this
-- column); set together on the row a retarget writes (bulk action
-- `retarget`, `PATCH /v1/jobs/{id}` with `topic`). Topics are compared and
-- stored as the `jobs.topic` column is: ASCII, byte for byte.
ALTER TABLE job_events
    ADD COLUMN topic_from VARCHAR(249) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN topic_to   VARCHAR(249) CHARACTER SET ascii COLLATE ascii_bin NULL;
