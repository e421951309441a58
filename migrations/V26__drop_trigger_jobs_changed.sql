-- tickler records the changes it makes itself (V24); see V25.
DROP TRIGGER IF EXISTS jobs_changed;
