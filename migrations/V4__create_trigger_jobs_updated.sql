-- Records changes of state, time or attempt (not payload-only edits).
-- A single-row INSERT ... VALUES is a "simple insert" to InnoDB: it takes no
-- table-level AUTO-INC lock on job_events, which an INSERT ... SELECT would
-- hold for the whole UPDATE statement (and deadlock concurrent creates).
CREATE TRIGGER jobs_updated AFTER UPDATE ON jobs FOR EACH ROW
BEGIN
    IF NOT (NEW.status <=> OLD.status)
       OR NOT (NEW.schedule_time <=> OLD.schedule_time)
       OR NOT (NEW.attempt <=> OLD.attempt) THEN
        INSERT INTO job_events (job_id, at, actor, status, schedule_time, attempt)
        VALUES (NEW.id, UTC_TIMESTAMP(3), COALESCE(@tickler_actor, 'sql'), NEW.status, NEW.schedule_time, NEW.attempt);
    END IF;
END
