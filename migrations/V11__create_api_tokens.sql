-- API tokens. The secret itself is never stored: only its SHA-256 (the
-- secret is 32 random bytes, so a fast hash is as good as a slow one).
-- `topics` and `scopes` are comma-separated lists (patterns are topic names
-- with '*', scopes are words), readable and editable in SQL. A revoked token
-- keeps its row, so its name stays taken and the history's actor
-- `api:NAME` keeps meaning one token. Every value is ASCII; names compare
-- without regard to case, so "Billing" and "billing" are one name.
CREATE TABLE api_tokens (
    id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    name          VARCHAR(100) NOT NULL,
    secret_sha256 BINARY(32) NOT NULL,
    topics        VARCHAR(4000) NOT NULL,
    scopes        VARCHAR(200) NOT NULL,
    -- Requests and jobs created per second; NULL takes the defaults
    -- (api_rate_requests, api_rate_jobs), 0 is unlimited.
    rate_requests INT UNSIGNED NULL,
    rate_jobs     INT UNSIGNED NULL,
    created_at    DATETIME(3) NOT NULL,
    revoked_at    DATETIME(3) NULL,
    PRIMARY KEY (id),
    UNIQUE KEY ux_api_tokens_name (name),
    UNIQUE KEY ux_api_tokens_secret (secret_sha256)
) ENGINE = InnoDB DEFAULT CHARSET = ascii COLLATE = ascii_general_ci;
