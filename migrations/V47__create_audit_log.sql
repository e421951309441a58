-- The audit log (#46): every control-plane change — token create and
-- revoke, topic pause/resume/pace/grouping, schedule create/edit/pause/
-- resume/delete, bulk operations and their previews, redrives, doctor
-- repairs, an instance's start-up with its settings (secrets masked).
--   at         when the change was asked (the database's clock, UTC)
--   actor      who: api:NAME (a token), api (auth = none), cli, instance
--   action     what: topic.pause, schedule.modify, bulk.preview, …
--   target     what it was done to: a topic, a schedule's or job's id, a
--              token's name, a bulk operation's filter
--   origin     from where: the client's address (and X-Forwarded-For), or
--              the host a CLI or an instance ran on
--   before_json, request_json, after_json
--              the state before, the request, and the answer (payloads
--              left out)
--   status     the answer's HTTP status (or 0 for a CLI change that
--              failed); NULL while the change runs, and after it if the
--              process died before its end was recorded: it may or may
--              not have happened
-- A row is written before the change and completed after it: a change
-- made through tickler is never without its row. Purged after
-- audit.retention_days.
CREATE TABLE audit_log (
    id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    at           DATETIME(3) NOT NULL,
    actor        VARCHAR(110) NOT NULL,
    action       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    target       VARCHAR(300) NULL,
    origin       VARCHAR(300) NULL,
    before_json  MEDIUMTEXT NULL,
    request_json MEDIUMTEXT NULL,
    after_json   MEDIUMTEXT NULL,
    status       SMALLINT UNSIGNED NULL,
    PRIMARY KEY (id),
    KEY ix_audit_log_at (at, id),
    KEY ix_audit_log_action (action, at, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
