-- Why a schedule's occurrences were not created (#59): the spans of its
-- instants that a pause or its misfire policy passed over, so that an
-- audit (`GET /v1/schedules/{id}/audit`, `tickler schedules audit`) tells
-- an occurrence paused or skipped from one missing.
--   reason     paused: the schedule was paused (written by the pause,
--                      closed by the resume);
--              skipped: missed while no tickler created it, and not
--                      created by its misfire policy (skip, fire_once)
--   from_at, to_at
--              the occurrences' instants it covers, both inclusive; to_at
--              NULL while a pause lasts. A run of skips over several
--              passes is one row, extended.
-- An occurrence that exists as a job is told by its job, whatever a span
-- says (fire_once's one firing lies inside its span of skips). Deleted
-- with the schedule.
CREATE TABLE schedule_gaps (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    schedule_id BIGINT UNSIGNED NOT NULL,
    reason      ENUM('paused', 'skipped') NOT NULL,
    from_at     DATETIME(3) NOT NULL,
    to_at       DATETIME(3) NULL,
    PRIMARY KEY (id),
    KEY ix_schedule_gaps_schedule (schedule_id, from_at)
) ENGINE = InnoDB;
