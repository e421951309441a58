-- The tzdata release an instance resolves local times with (#60); NULL for
-- an instance built before this column. The doctor flags a fleet whose
-- live instances disagree.
ALTER TABLE instances ADD COLUMN tzdata_version VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL;
