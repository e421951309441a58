-- The payload bytes each job counts for against its token's quota (#57):
-- the payload's length as the client gave it, before compression and
-- sealing, written by the create that charges it and by a change of the
-- payload, so that the recount adds up what the creates charged. NULL for
-- rows written before it (they count their stored length). The index
-- finds the token a job counts for when its payload changes, whoever
-- changes it. One statement: an instant column and a small table's index.
ALTER TABLE token_jobs
    ADD COLUMN payload_bytes BIGINT UNSIGNED NULL,
    ADD INDEX token_jobs_job (job_id);
