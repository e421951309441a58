-- Bulk changes (POST /v1/jobs/bulk): one row per operation. It works through
-- the jobs it matches by id, in bounded batches; each batch's changes and
-- the move of `cursor_id` commit in one transaction, so an operation resumed
-- after a crash (by any instance, once `updated_at` is stale) neither skips
-- nor repeats a job. Only jobs with ids up to `max_id` (the newest when it
-- started) are touched.
CREATE TABLE bulk_ops (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    created_by  VARCHAR(110) NOT NULL,
    filter_json TEXT NOT NULL,
    action_json TEXT NOT NULL,
    status      ENUM('running', 'done', 'failed') NOT NULL DEFAULT 'running',
    max_id      BIGINT UNSIGNED NOT NULL,
    cursor_id   BIGINT UNSIGNED NOT NULL DEFAULT 0,
    total       BIGINT UNSIGNED NOT NULL,
    done        BIGINT UNSIGNED NOT NULL DEFAULT 0,
    changed     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    skipped     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    errors      TEXT NULL,
    owner_token BIGINT UNSIGNED NOT NULL,
    created_at  DATETIME(3) NOT NULL,
    updated_at  DATETIME(3) NOT NULL,
    finished_at DATETIME(3) NULL,
    PRIMARY KEY (id),
    KEY ix_bulk_ops_status_updated (status, updated_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_general_ci;
