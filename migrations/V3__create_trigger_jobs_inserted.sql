-- tickler's connections set @tickler_actor; any other session is a person.
CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs FOR EACH ROW
    INSERT INTO job_events (job_id, at, actor, status, schedule_time, attempt)
    VALUES (NEW.id, UTC_TIMESTAMP(3), COALESCE(@tickler_actor, 'sql'), NEW.status, NEW.schedule_time, NEW.attempt);
