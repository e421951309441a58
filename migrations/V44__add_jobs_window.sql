-- Flexible windows (#45): a job with `window_ms` may be produced at any
-- instant of [window_start, window_start + window_ms]; its schedule_time is
-- the instant tickler decided on when it was created (or moved), spread
-- over the window so that what falls due together does not go out
-- together. window_start is the time the caller asked for. NULL: no window.
ALTER TABLE jobs
    ADD COLUMN window_ms    INT UNSIGNED NULL,
    ADD COLUMN window_start DATETIME(3) NULL;
