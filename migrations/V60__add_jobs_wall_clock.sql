-- Wall-clock jobs (#60): a job given a local time and an IANA zone keeps
-- them beside the instant computed from them (`schedule_time`), with the
-- tzdata release that computed it. When a newer tzdata is loaded, the
-- pending rows of an older release are computed again and moved where the
-- instant changed. All three are NULL for a job given an instant. The key
-- finds the rows of an older release without reading any other job: rows
-- with a NULL release are one entry each at the start of the index.
ALTER TABLE jobs
    ADD COLUMN run_local DATETIME(3) NULL,
    ADD COLUMN time_zone VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN tzdata_version VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD KEY ix_jobs_tzdata (tzdata_version);
