-- The history records the status `expired` too (V41).
ALTER TABLE job_events
    MODIFY COLUMN status ENUM('pending', 'dispatching', 'dispatched', 'succeeded', 'dead', 'cancelled', 'expired') NOT NULL;
