-- Rolling back the claim's room (V37), once only a version built before it
-- serves (the claim of a version built for V37 empties the column): drop
-- the column and make the schema history forget V37 (a later `tickler
-- migrate` adds it again). Instant on MariaDB 10.6+ and MySQL 8.0.29+;
-- older MySQL 8.0 rebuilds the table online.
ALTER TABLE jobs DROP COLUMN claim_room;
DELETE FROM refinery_schema_history WHERE version = 37;
