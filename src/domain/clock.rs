//! tickler's "now": the stores' clocks (MySQL's `UTC_TIMESTAMP(3)`, Redis's
//! `TIME`), plus an offset that only `tickler dev` ever moves.
//!
//! `tickler serve` runs on a [`Clock::real`]: the offset is 0 and can never
//! change, and nothing here touches a statement. `tickler dev` runs on a
//! [`Clock::virtual_time`]: `POST /v1/dev/clock` advances it, and then
//! - every MySQL session of the instance starts each use with `SET
//!   timestamp` = the server's own clock (`SYSDATE(6)`) + the offset, so
//!   `UTC_TIMESTAMP(3)`, column defaults and triggers all read the moved
//!   time while the database stays the only authority inside it;
//! - the Redis scripts that decide due-ness add the offset to `TIME`;
//! - the API checks times against [`Clock::now`].
//!
//! The offset only grows: a job never becomes "not yet due" again.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

/// The most one advance may move the clock: ten years.
pub const ADVANCE_MOST_MS: i64 = 10 * 366 * 24 * 3_600_000;

/// Cheap to clone: clones share the offset.
#[derive(Clone, Debug)]
pub struct Clock {
    /// Milliseconds added to the stores' clocks; 0 on a real clock.
    offset_ms: Arc<AtomicI64>,
    /// `tickler dev`'s clock: the offset may move.
    movable: bool,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::real()
    }
}

/// Why an advance was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum AdvanceError {
    /// A real clock (`tickler serve`) never moves.
    Real,
    /// Not in 1..=[`ADVANCE_MOST_MS`].
    OutOfRange,
}

impl Clock {
    /// The stores' clocks as they are: `tickler serve`.
    pub fn real() -> Clock {
        Clock {
            offset_ms: Arc::new(AtomicI64::new(0)),
            movable: false,
        }
    }

    /// A clock that [`Clock::advance`] moves forward: `tickler dev`.
    pub fn virtual_time() -> Clock {
        Clock {
            offset_ms: Arc::new(AtomicI64::new(0)),
            movable: true,
        }
    }

    /// Whether this is `tickler dev`'s movable clock.
    pub fn is_virtual(&self) -> bool {
        self.movable
    }

    /// How far ahead of the stores' clocks this clock is, in ms.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::SeqCst)
    }

    /// This process's idea of now: its own clock plus the offset. The
    /// stores decide due-ness by theirs; this is for checks of input.
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + TimeDelta::milliseconds(self.offset_ms())
    }

    /// Moves the clock `ms` forward; returns the new offset.
    pub fn advance(&self, ms: i64) -> Result<i64, AdvanceError> {
        if !self.movable {
            return Err(AdvanceError::Real);
        }
        if !(1..=ADVANCE_MOST_MS).contains(&ms) {
            return Err(AdvanceError::OutOfRange);
        }
        Ok(self.offset_ms.fetch_add(ms, Ordering::SeqCst) + ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_clock_never_moves() {
        let clock = Clock::real();
        assert_eq!(clock.advance(1_000), Err(AdvanceError::Real));
        assert_eq!(clock.offset_ms(), 0);
        assert!(!clock.is_virtual());
    }

    #[test]
    fn a_virtual_clock_moves_forward_only_and_its_clones_with_it() {
        let clock = Clock::virtual_time();
        let seen = clock.clone();
        assert_eq!(clock.advance(30 * 86_400_000), Ok(30 * 86_400_000));
        assert_eq!(clock.advance(5), Ok(30 * 86_400_000 + 5));
        assert_eq!(seen.offset_ms(), 30 * 86_400_000 + 5);
        assert_eq!(clock.advance(0), Err(AdvanceError::OutOfRange));
        assert_eq!(clock.advance(-1), Err(AdvanceError::OutOfRange));
        assert_eq!(
            clock.advance(ADVANCE_MOST_MS + 1),
            Err(AdvanceError::OutOfRange)
        );
        let ahead = (seen.now() - Utc::now()).num_days();
        assert!((29..=30).contains(&ahead), "{ahead}");
    }
}
