-- A schedule's occurrences may carry a flexible window (window_ms, as a
-- job's) and a jitter (jitter_ms): each occurrence's time moved later by
-- up to jitter_ms, decided from its key (#45). NULL: none.
ALTER TABLE schedules
    ADD COLUMN window_ms INT UNSIGNED NULL,
    ADD COLUMN jitter_ms INT UNSIGNED NULL;
