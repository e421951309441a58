-- Marks the rows of one batch INSERT so they can be read back in order
-- (MySQL has no RETURNING). Internal; not indexed; NULL for single creates.
ALTER TABLE jobs ADD COLUMN create_token BIGINT UNSIGNED NULL;
