-- tickler records the jobs it creates itself (V24). Hand edits are
-- recorded only with history_hand_edits = trigger, by jobs_hand_inserted
-- and jobs_hand_edited, which `tickler migrate` installs apart from these
-- migrations: creating a trigger takes SUPER where binary logging is on.
DROP TRIGGER IF EXISTS jobs_inserted;
