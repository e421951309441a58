-- Payload schemas (#60): the JSON Schema a topic's payloads must match, as
-- JSON text (NULL: none). Checked on create and again before each job is
-- produced; a text that is not a schema (a hand edit) holds the topic's
-- due jobs rather than send them unchecked (docs/api.md, "Payload schemas").
ALTER TABLE topic_controls ADD COLUMN payload_schema MEDIUMTEXT NULL;
