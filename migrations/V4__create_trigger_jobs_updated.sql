-- Records changes of state, time or attempt (not payload-only edits).
CREATE TRIGGER jobs_updated AFTER UPDATE ON jobs FOR EACH ROW
    INSERT INTO job_events (job_id, at, actor, status, schedule_time, attempt)
    SELECT NEW.id, UTC_TIMESTAMP(3), COALESCE(@tickler_actor, 'sql'), NEW.status, NEW.schedule_time, NEW.attempt
    FROM DUAL
    WHERE NOT (NEW.status <=> OLD.status)
       OR NOT (NEW.schedule_time <=> OLD.schedule_time)
       OR NOT (NEW.attempt <=> OLD.attempt);
