//! Job ids known before the write (#62). A row's id is bound into the seal
//! of its payload and headers, so an id that exists only after the INSERT
//! cost every sealed create a second statement; and an engine without one
//! ordered counter (TiDB's per-server caches, Vitess's shards) gives no
//! order to rely on. So each store handle reserves a block of ids from the
//! `id_blocks` row by a compare-and-set on `next_id` — no lock, no engine's
//! sequence — and hands them out in memory, in ascending order: on one
//! instance ids run 1, 2, 3… as they did from AUTO_INCREMENT.
//!
//! Beside it, `jobs.id` keeps its AUTO_INCREMENT: a row inserted by hand,
//! or by a build before these blocks, takes the table's next id, which
//! InnoDB keeps just above the highest id in the table — possibly the next
//! id of a block in use. The INSERT then finds it taken (its read-back sees
//! a row at the id without the write's `create_token`): the block is
//! dropped and the write made again with fresh ids (`StoreError::lost_race`),
//! never a job lost or answered as another's duplicate. Rows inserted that
//! way keep coming while an older build is live (a rolling upgrade), so for
//! [`DESCENDING_FOR`] after such a find the handle hands its blocks out from
//! the top down, each write the highest ids left, and starts a block
//! [`GAP`] above the table's highest id: a block's first write then takes
//! its top, the counter goes past the whole block, and those rows land above
//! it, never in it.
//!
//! Crash after a reservation: its ids are never used, a gap and nothing
//! else. Ids carry no time order (handles' blocks interleave, and a
//! handle hands a block out downwards for a while): what needs "created
//! after" asks `created_at`.

use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::error::StoreError;
use super::Store;
use crate::domain::job::JobId;

/// The ids a reservation takes when fewer are asked for.
const BLOCK: u64 = 1_000;

/// Room left below a reservation for rows inserted by auto-increment
/// between it and its first row, while blocks are handed out downwards.
const GAP: u64 = 10_000;

/// How long a handle hands its blocks out from the top down after it found
/// an id of its block taken.
const DESCENDING_FOR: Duration = Duration::from_secs(600);

/// The highest id handed out: 2^53 − 1, the largest integer a JSON number
/// carries exactly into JavaScript (the TypeScript client reads ids as
/// numbers).
pub(super) const ID_MAX: u64 = (1 << 53) - 1;

/// A reservation's tries before it gives up as contention (each lost one
/// means another handle reserved in between).
const RESERVE_TRIES: u32 = 8;

/// What is left of a handle's block, and until when it is handed out from
/// the top down.
#[derive(Debug, Default)]
pub(super) struct IdBlocks {
    state: Mutex<Blocks>,
}

#[derive(Debug, Default)]
struct Blocks {
    left: Range<u64>,
    descending_until: Option<Instant>,
}

impl IdBlocks {
    /// `n` ids from the block, in ascending order (a write's items get ids
    /// in their order): its lowest, or its highest while descending.
    fn take(&self, n: u64) -> Option<Vec<JobId>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Blocks {
            left,
            descending_until,
        } = &mut *state;
        if left.end - left.start < n {
            return None;
        }
        if descending_until.is_some_and(|until| Instant::now() < until) {
            let ids = (left.end - n..left.end).collect();
            left.end -= n;
            Some(ids)
        } else {
            let ids = (left.start..left.start + n).collect();
            left.start += n;
            Some(ids)
        }
    }

    /// A new block, what was left of the old one dropped.
    fn put(&self, block: Range<u64>) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).left = block;
    }

    /// Whether blocks are handed out from the top down now.
    fn descending(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .descending_until
            .is_some_and(|until| Instant::now() < until)
    }

    /// Drops what is left, and hands blocks out from the top down for a
    /// while: an id of the block was found taken.
    pub(super) fn forget(&self) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.left = 0..0;
        state.descending_until = Instant::now().checked_add(DESCENDING_FOR);
    }
}

/// Where a reservation of `n` starts: at the sequence's next id, or just
/// above the table's highest id when the sequence is not above it ([`GAP`]
/// above it with `gap`, while blocks are handed out downwards). A
/// `next_id` whose block would pass [`ID_MAX`] (set by hand) is not
/// followed: the table's ids are. None when those would pass it too.
fn block_start(next_id: u64, max_id: u64, n: u64, gap: bool) -> Option<u64> {
    let fits = |start: u64| start.checked_add(n).is_some_and(|end| end <= ID_MAX + 1);
    if next_id > max_id && fits(next_id) {
        return Some(next_id);
    }
    let start = max_id.checked_add(if gap { 1 + GAP } else { 1 })?;
    fits(start).then_some(start)
}

impl Store {
    /// `n` ids for new jobs, none of them handed out before. Taken from
    /// this handle's block, or from a block reserved for it on a
    /// connection of its own (called before the write's transaction
    /// begins: the reservation commits by itself, and holds no lock a
    /// create waits on).
    pub(super) async fn job_ids(&self, n: usize) -> Result<Vec<JobId>, StoreError> {
        let n = n as u64;
        if let Some(ids) = self.ids.take(n) {
            return Ok(ids);
        }
        let block = self.id_block_reserve(n.max(BLOCK)).await?;
        self.ids.put(block);
        self.ids
            .take(n)
            .ok_or_else(|| StoreError::Corrupt("an id block smaller than asked".to_owned()))
    }

    /// Reserves `n` ids: the sequence's row read, then moved past them by a
    /// compare-and-set on what was read; a lost race reads again.
    async fn id_block_reserve(&self, n: u64) -> Result<Range<u64>, StoreError> {
        for _ in 0..RESERVE_TRIES {
            let next_id: Option<u64> =
                sqlx::query_scalar("SELECT next_id FROM id_blocks WHERE name = 'jobs'")
                    .fetch_optional(&self.pool)
                    .await?;
            let Some(next_id) = next_id else {
                // The first reservation on this database (or the row was
                // deleted by hand): whichever insert lands first starts it.
                sqlx::query("INSERT IGNORE INTO id_blocks (name, next_id) VALUES ('jobs', 0)")
                    .execute(&self.pool)
                    .await?;
                continue;
            };
            // id-order: the highest id only places a block above every row;
            // no order among the rows is used.
            let max_id: Option<u64> = sqlx::query_scalar("SELECT MAX(id) FROM jobs")
                .fetch_one(&self.pool)
                .await?;
            let gap = self.ids.descending();
            let start = block_start(next_id, max_id.unwrap_or(0), n, gap).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "job ids are exhausted: the table's highest id is {} and ids stay at most 2^53 - 1",
                    max_id.unwrap_or(0)
                ))
            })?;
            let moved =
                sqlx::query("UPDATE id_blocks SET next_id = ? WHERE name = 'jobs' AND next_id = ?")
                    .bind(start + n)
                    .bind(next_id)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
            if moved == 1 {
                return Ok(start..start + n);
            }
        }
        Err(StoreError::lost_race(
            "another handle reserved job ids at every try".to_owned(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_handed_out_upwards_and_downwards_once_an_id_was_taken() {
        let blocks = IdBlocks::default();
        assert_eq!(blocks.take(1), None);
        blocks.put(100..110);
        assert_eq!(blocks.take(2), Some(vec![100, 101]));
        assert_eq!(blocks.take(3), Some(vec![102, 103, 104]));
        assert!(!blocks.descending());
        blocks.forget();
        assert!(blocks.descending());
        assert_eq!(blocks.take(1), None, "what was left is dropped");
        blocks.put(200..205);
        assert_eq!(blocks.take(2), Some(vec![203, 204]), "the top first");
        assert_eq!(blocks.take(4), None, "only three left");
        assert_eq!(blocks.take(3), Some(vec![200, 201, 202]));
        assert_eq!(blocks.take(1), None);
    }

    #[test]
    fn a_reservation_follows_the_sequence_when_it_is_ahead_of_the_table() {
        assert_eq!(block_start(5_000, 4_000, 1_000, false), Some(5_000));
        assert_eq!(block_start(5_000, 4_000, 1_000, true), Some(5_000));
    }

    #[test]
    fn a_fresh_database_starts_at_one() {
        assert_eq!(block_start(0, 0, 1_000, false), Some(1));
    }

    #[test]
    fn a_sequence_behind_the_table_starts_above_it_with_room_while_descending() {
        // Rows inserted by auto-increment (by hand, an older build) passed it.
        assert_eq!(block_start(5_000, 5_000, 1_000, false), Some(5_001));
        assert_eq!(block_start(0, 123, 1_000, false), Some(124));
        assert_eq!(block_start(5_000, 5_000, 1_000, true), Some(5_001 + GAP));
    }

    #[test]
    fn a_sequence_set_past_the_largest_id_is_not_followed() {
        assert_eq!(block_start(u64::MAX, 10, 1_000, false), Some(11));
        assert_eq!(block_start(ID_MAX + 1, 10, 1_000, false), Some(11));
    }

    #[test]
    fn ids_never_pass_the_largest_javascript_integer() {
        assert_eq!(
            block_start(ID_MAX - 999, 0, 1_000, false),
            Some(ID_MAX - 999)
        );
        assert_eq!(block_start(ID_MAX - 998, 0, 1_000, false), Some(1));
        assert_eq!(block_start(0, ID_MAX - 5, 1_000, false), None);
        assert_eq!(block_start(0, u64::MAX, 1, false), None);
    }
}
