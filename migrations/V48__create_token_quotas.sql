-- Quotas per API token (#46): the most pending jobs and the most payload
-- bytes of pending jobs a token may hold. NULL: no limit (the default).
-- Editable in SQL; the next create reads them.
ALTER TABLE api_tokens
    ADD COLUMN max_pending_jobs  BIGINT UNSIGNED NULL,
    ADD COLUMN max_payload_bytes BIGINT UNSIGNED NULL;

-- A token's usage: charged by each create in the create's transaction
-- (a create that would pass a quota is rolled back whole), recounted
-- exactly from token_jobs every quotas.recount_interval_ms (jobs that left
-- pending stop counting then).
CREATE TABLE token_usage (
    token_id      BIGINT UNSIGNED NOT NULL,
    pending_jobs  BIGINT UNSIGNED NOT NULL DEFAULT 0,
    payload_bytes BIGINT UNSIGNED NOT NULL DEFAULT 0,
    counted_at    DATETIME(3) NULL,
    PRIMARY KEY (token_id)
) ENGINE = InnoDB;

-- The jobs a token with a quota created, written with the job (tokens
-- without one write nothing here, and pay nothing). Rows of jobs finished
-- for good (succeeded, cancelled, expired, dispatched expecting no result)
-- or purged are pruned by the recount; dead ones stay (a redrive makes
-- them pending again).
CREATE TABLE token_jobs (
    token_id BIGINT UNSIGNED NOT NULL,
    job_id   BIGINT UNSIGNED NOT NULL,
    PRIMARY KEY (token_id, job_id)
) ENGINE = InnoDB;
