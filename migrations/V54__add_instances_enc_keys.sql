-- The encryption keys an instance holds (#57), by id, comma-separated
-- ('' for none); NULL for an instance built before this column. An
-- instance seals new rows under its active key only while every live
-- instance holds it, and leaves a row sealed under a key it lacks to one
-- that holds it rather than set the job aside. Key ids only: never a key.
ALTER TABLE instances ADD COLUMN enc_keys VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NULL;
