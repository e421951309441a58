-- Serves the loader's scan for pending rows changed since its last pass
-- (edited by hand, rescheduled, requeued). Covering: schedule_time bounds the
-- window, and created_at tells a fresh insert (already indexed) from an edit.
ALTER TABLE jobs ADD KEY ix_jobs_status_updated (status, updated_at, schedule_time, created_at);
