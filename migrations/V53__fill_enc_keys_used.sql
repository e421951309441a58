-- Marks `enc_keys_used` as filled with the keys rows were sealed under
-- before V52 (encryption at rest came with V49). The filling itself is
-- done by `tickler migrate` just before this runs (src/store/migrate.rs,
-- `enc_keys_fill`): a plain SELECT DISTINCT, a consistent read that locks
-- no row, where an INSERT … SELECT here would hold a shared lock on every
-- row of `jobs` for as long as it reads them, stopping dispatch. A run
-- cut short between the two fills again.
DO 0;
