-- Fair dispatch by tenant (#46): a topic's jobs may be grouped — by a key
-- prefix (`key:SEP`) or a header's value (`header:NAME`) — each group
-- paced on its own and the topic's pace shared fairly between them.
--   group_by              `key:SEP` or `header:NAME` (NULL: the
--                         configuration's `topics.<name>.group_by`, or none)
--   group_max_per_second  each group's pace across every instance (NULL:
--                         the configuration's, or none: the groups only
--                         share the topic's pace)
ALTER TABLE topic_controls
    ADD COLUMN group_by VARCHAR(110) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN group_max_per_second INT UNSIGNED NULL;
