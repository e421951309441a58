-- The history's actor is `api:<token name>` (names up to 100 characters) or
-- `bulk:<id>`: 16 characters refused every write of a token with a name
-- longer than 12 under strict SQL mode.
ALTER TABLE job_events MODIFY actor VARCHAR(110) CHARACTER SET ascii COLLATE ascii_bin NOT NULL;
