//! Job ids known before the write (#62). A row's id is bound into the seal
//! of its payload and headers, so an id that exists only after the INSERT
//! cost every sealed create a second statement; and an engine without one
//! ordered counter (TiDB's per-server caches, Vitess's shards) gives no
//! order to rely on. So each store handle reserves a block of ids from the
//! `id_blocks` row by a compare-and-set on `next_id` — no lock, no engine's
//! sequence — and hands them out from the block's top down: each write
//! takes the highest ids left, in ascending order for its items.
//!
//! Beside it, `jobs.id` keeps its AUTO_INCREMENT: a row inserted by hand,
//! or by a build before these blocks, takes the table's next id, which
//! InnoDB keeps above every id in the table. Handing a block out from its
//! top makes its first write's rows the table's highest, so those rows go
//! above the whole block and never into it; and a reservation starts [`GAP`] above
//! the table's highest id when the sequence has fallen behind it. Should a
//! row still take an id first (a counter of its own, a restored table),
//! the INSERT finds it taken: the block is dropped and the write made
//! again with fresh ids (`StoreError::lost_race`), never a job lost or
//! answered as another's duplicate.
//!
//! Crash after a reservation: its ids are never used, a gap and nothing
//! else. Ids carry no time order (a handle's writes take ids downwards,
//! and handles' blocks interleave): what needs "created after" asks
//! `created_at`.

use std::ops::Range;
use std::sync::Mutex;

use super::error::StoreError;
use super::Store;
use crate::domain::job::JobId;

/// The ids a reservation takes when fewer are asked for.
const BLOCK: u64 = 1_000;

/// Room left below a reservation for rows inserted by auto-increment
/// between it and its first row, when the sequence is behind the table.
const GAP: u64 = 10_000;

/// The highest id handed out: 2^53 − 1, the largest integer a JSON number
/// carries exactly into JavaScript (the TypeScript client reads ids as
/// numbers).
pub(super) const ID_MAX: u64 = (1 << 53) - 1;

/// A reservation's tries before it gives up as contention (each lost one
/// means another handle reserved in between).
const RESERVE_TRIES: u32 = 8;

/// What is left of a handle's block: handed out from its end down.
#[derive(Debug, Default)]
pub(super) struct IdBlocks {
    left: Mutex<Range<u64>>,
}

impl IdBlocks {
    /// The top `n` ids left in the block, in ascending order (a write's
    /// items get ids in their order), if it holds that many.
    fn take(&self, n: u64) -> Option<Vec<JobId>> {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        if left.end - left.start < n {
            return None;
        }
        let ids = (left.end - n..left.end).collect();
        left.end -= n;
        Some(ids)
    }

    /// A new block, what was left of the old one dropped.
    fn put(&self, block: Range<u64>) {
        *self.left.lock().unwrap_or_else(|p| p.into_inner()) = block;
    }

    /// Drops what is left: an id of it was found taken.
    pub(super) fn forget(&self) {
        self.put(0..0);
    }
}

/// Where a reservation of `n` starts: at the sequence's next id, or [`GAP`]
/// above the table's highest id when the sequence is not above it. A
/// `next_id` whose block would pass [`ID_MAX`] (set by hand) is not
/// followed: the table's ids are. None when those would pass it too.
fn block_start(next_id: u64, max_id: u64, n: u64) -> Option<u64> {
    let fits = |start: u64| start.checked_add(n).is_some_and(|end| end <= ID_MAX + 1);
    if next_id > max_id && fits(next_id) {
        return Some(next_id);
    }
    let start = max_id.checked_add(1 + GAP)?;
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
            let start = block_start(next_id, max_id.unwrap_or(0), n).ok_or_else(|| {
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
    fn a_block_is_handed_out_from_its_top_down() {
        let blocks = IdBlocks::default();
        assert_eq!(blocks.take(1), None);
        blocks.put(100..105);
        assert_eq!(blocks.take(2), Some(vec![103, 104]));
        assert_eq!(blocks.take(4), None, "only three left");
        assert_eq!(blocks.take(3), Some(vec![100, 101, 102]));
        assert_eq!(blocks.take(1), None);
        blocks.put(200..210);
        blocks.forget();
        assert_eq!(blocks.take(1), None);
    }

    #[test]
    fn a_reservation_follows_the_sequence_when_it_is_ahead_of_the_table() {
        assert_eq!(block_start(5_000, 4_000, 1_000), Some(5_000));
    }

    #[test]
    fn a_sequence_behind_the_table_starts_a_gap_above_it() {
        // Rows inserted by auto-increment (by hand, an older build) passed it.
        assert_eq!(block_start(5_000, 5_000, 1_000), Some(5_000 + 1 + GAP));
        assert_eq!(block_start(0, 0, 1_000), Some(1 + GAP));
        assert_eq!(block_start(0, 123, 1_000), Some(124 + GAP));
    }

    #[test]
    fn a_sequence_set_past_the_largest_id_is_not_followed() {
        assert_eq!(block_start(u64::MAX, 10, 1_000), Some(11 + GAP));
        assert_eq!(block_start(ID_MAX + 1, 10, 1_000), Some(11 + GAP));
    }

    #[test]
    fn ids_never_pass_the_largest_javascript_integer() {
        assert_eq!(block_start(ID_MAX - 999, 0, 1_000), Some(ID_MAX - 999));
        assert_eq!(block_start(ID_MAX - 998, 0, 1_000), Some(1 + GAP));
        assert_eq!(block_start(0, ID_MAX - 5, 1_000), None);
        assert_eq!(block_start(0, u64::MAX, 1), None);
    }
}
