-- One index for the hot path, part 2: `(status, status_at, id, topic)`,
-- built online (concurrent reads and writes go on; the statement fails
-- rather than lock the table where the server cannot). On a table of
-- millions of rows this runs for a minute or more.
--
-- It serves what three indexes served: the loader's and the overdue
-- probe's due range (`status = 'pending' AND status_at < …`, in
-- (status_at, id) order: `id` is named before `topic` for that), the
-- searches for `dispatching` rows, the retention purge and the lateness
-- sample (`status = 'succeeded' AND status_at < …`, one status at a time),
-- and the counts by status and topic (index only: `topic` is in it). A
-- claim moves a job's entry once and a mark once, where the three moved
-- four. V36 drops the three once no tickler reads them.
ALTER TABLE jobs
    ADD KEY ix_jobs_status_at (status, status_at, id, topic),
    ALGORITHM = INPLACE, LOCK = NONE;
