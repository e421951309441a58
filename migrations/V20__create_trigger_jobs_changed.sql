-- Replaces the history trigger jobs_updated (V4) with one that leaves out the
-- dispatcher's claim, pending → dispatching: it lasts milliseconds, and
-- recording it cost a row insert per dispatched job (docs/benchmarks.md).
-- A claim that ends otherwise than in `dispatched` still shows: the rescue
-- back to pending records its row, with the reason in last_error.
--
-- Created before V21 drops the old one (MySQL 8 has no CREATE OR REPLACE
-- TRIGGER): an upgrade interrupted between the two records some changes
-- twice, never none.
CREATE TRIGGER jobs_changed AFTER UPDATE ON jobs FOR EACH ROW
BEGIN
    IF (NOT (NEW.status <=> OLD.status)
        OR NOT (NEW.schedule_time <=> OLD.schedule_time)
        OR NOT (NEW.attempt <=> OLD.attempt))
       AND NOT (OLD.status = 'pending' AND NEW.status = 'dispatching') THEN
        INSERT INTO job_events (job_id, at, actor, status, schedule_time, attempt)
        VALUES (NEW.id, UTC_TIMESTAMP(3), COALESCE(@tickler_actor, 'sql'), NEW.status, NEW.schedule_time, NEW.attempt);
    END IF;
END
