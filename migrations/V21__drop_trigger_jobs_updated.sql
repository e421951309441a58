-- The history trigger is jobs_changed (V20) from now on.
DROP TRIGGER IF EXISTS jobs_updated;
