-- Debounce with a ceiling, and keys that can be used again (#60).
-- `debounce_first_at` / `debounce_max_ms`: the first request time of a
-- debounced (topic, key) generation (the database's clock) and the longest
-- a later debounce may move it past that; a pending debounced job is
-- never moved past debounce_first_at + debounce_max_ms (NULL: no ceiling).
-- `generation` / `previous_id`: a debounce after the job holding the key
-- went out starts a new job, generation + 1, naming the one before it.
-- `retired_key`: that earlier job's key, moved out of `job_key` to free the
-- unique (topic, job_key) for the new generation (it keeps its history).
ALTER TABLE jobs
    ADD COLUMN debounce_first_at DATETIME(3) NULL,
    ADD COLUMN debounce_max_ms BIGINT UNSIGNED NULL,
    ADD COLUMN generation INT UNSIGNED NOT NULL DEFAULT 0,
    ADD COLUMN previous_id BIGINT UNSIGNED NULL,
    ADD COLUMN retired_key VARBINARY(1020) NULL;
