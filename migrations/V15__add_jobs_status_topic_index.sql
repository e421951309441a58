-- Serves the gauges of jobs by status and topic as an index-only range scan.
-- (Its own file: on a large table this runs for minutes, and a migration
-- interrupted half-way must leave nothing applied.)
ALTER TABLE jobs ADD KEY ix_jobs_status_topic (status, topic);
