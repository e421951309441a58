-- When the current claim was won, on the database's clock. A claim whose
-- outcome is unknown (its instance died, its send timed out, its mark was
-- lost) is settled by reading the job's topic back from this instant on:
-- no record of the claim can be older. NULL outside a claim.
ALTER TABLE jobs ADD COLUMN claimed_at DATETIME(3) NULL;
