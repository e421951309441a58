-- History is written by tickler itself from now on (src/store/history.rs):
-- a statement that changes a job's status, time or attempt sets
-- event_token on the rows it changes, and records in job_events, in the
-- same transaction, the rows carrying its token. Fixed size and
-- unindexed: setting it rewrites nothing but the row, in place.
ALTER TABLE jobs ADD COLUMN event_token BIGINT UNSIGNED NOT NULL DEFAULT 0;
