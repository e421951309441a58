-- Superseded by ix_jobs_status_updated.
ALTER TABLE jobs DROP KEY ix_jobs_updated_at;
