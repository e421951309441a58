-- Ids tickler knows before it writes (#62): each process reserves a block
-- of job ids by a compare-and-set on `next_id` and hands them out from the
-- block's top down, so a row is sealed under its id in its own INSERT, and
-- no engine's auto-increment order is relied on. `jobs.id` keeps its
-- AUTO_INCREMENT for rows inserted by hand or by an older build.
CREATE TABLE id_blocks (
    name VARCHAR(32) NOT NULL PRIMARY KEY,
    next_id BIGINT UNSIGNED NOT NULL
);
