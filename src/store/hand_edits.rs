//! Hand edits observed, without a trigger (`mysql.history_hand_edits =
//! observe`): what TiDB and Vitess, which have no triggers, record hand
//! edits with, and any MySQL that wants them recorded without one.
//!
//! tickler records each of its own changes beside the change, in its
//! transaction ([`super::history`]). So a row whose status, due time or
//! attempt is not what its last history row says was changed by someone
//! else: a person or a script in SQL. A pass reads the rows changed since a
//! given instant — pending and dispatching ones by `changed_at`, finished
//! ones by `(status, status_at)`, both indexed — beside their last history
//! row, and records each difference as actor `sql`, at the row's
//! `updated_at` (when the edit was made, as a trigger would have).
//!
//! The record is a compare-and-set on the row as the pass read it (its
//! status, time, attempt, `updated_at` and `event_token`): it sets a fresh
//! `event_token` and keeps `updated_at`, then inserts the history rows of
//! the rows that carry it, in one transaction. A row changed since the
//! read (by tickler, whose own history row then comes after, or by another
//! instance's pass, which recorded it) is left alone; two passes never
//! record one edit twice.
//!
//! What a trigger sees and a pass does not:
//! - the claim (`pending → dispatching`), which tickler does not record
//!   either: a `dispatching` row is compared by its time and attempt only;
//! - an edit that tickler changes the row again after, before a pass reads
//!   it (its own change is recorded, the edit is not), or that puts the row
//!   back as its history last says;
//! - a row inserted by hand, until it is read changed (pending and changed
//!   after its creation, or finished);
//! - an edit whose transaction commits more than [`OBSERVE_OVERLAP`] after
//!   its statement ran.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{Connection, MySql, QueryBuilder, Row};

use super::error::StoreError;
use super::handle::Store;
use super::history::event_token;
use super::sql::{db_time, push_id_list};
use crate::domain::job::JobId;

/// How far back before the last pass each pass reads again: a hand edit
/// that committed after the pass read past its `updated_at` is read by the
/// next (an autocommit statement commits in milliseconds).
pub const OBSERVE_OVERLAP: Duration = Duration::from_secs(10);

/// Rows read a statement.
const PAGE: u32 = 500;

/// A changed row as a pass read it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    id: JobId,
    status: String,
    schedule_time: NaiveDateTime,
    attempt: u32,
    updated_at: NaiveDateTime,
    event_token: u64,
}

/// A history row's values: status, time, attempt.
type Recorded = (String, NaiveDateTime, u32);

/// Where a pass looks: the column a range of changed rows is read by, and
/// what else the row must be.
#[derive(Debug, Clone, Copy)]
enum Scan {
    /// Pending and dispatching rows changed after their creation.
    Live,
    /// Rows of a finished status (and dispatched ones expecting no
    /// result), by when they took it.
    Finished(&'static str),
}

const SCANS: [Scan; 6] = [
    Scan::Live,
    Scan::Finished("dispatched"),
    Scan::Finished("succeeded"),
    Scan::Finished("dead"),
    Scan::Finished("cancelled"),
    Scan::Finished("expired"),
];

/// The rows a pass found as their history says, each as it read it, so
/// that the next passes, which read them again in their overlap, do not
/// read their history again. Kept by the caller between passes.
#[derive(Debug, Default)]
pub struct HandEditsChecked {
    /// A row's fingerprint (id, status, time, attempt, `updated_at`,
    /// `event_token`), with its scan column's value: forgotten once that
    /// is before the passes' start.
    rows: HashMap<u64, NaiveDateTime>,
}

impl HandEditsChecked {
    /// Rows remembered.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl Seen {
    fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (
            self.id,
            &self.status,
            self.schedule_time,
            self.attempt,
            self.updated_at,
            self.event_token,
        )
            .hash(&mut hasher);
        hasher.finish()
    }
}

impl Store {
    /// One pass: records as actor `sql` the hand edits among the rows
    /// changed at or after `since` and before `until` (the pass's own
    /// instant: rows changed during the pass are the next one's, so a
    /// steady stream of changes cannot keep it going); returns how many it
    /// recorded. A row
    /// `checked` holds as it is now was found unedited by an earlier pass
    /// and is not compared again; the rows found so are added to it.
    pub async fn hand_edits_observe(
        &self,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        checked: &mut HandEditsChecked,
    ) -> Result<u64, StoreError> {
        let from = db_time(since);
        checked.rows.retain(|_, at| *at >= from);
        let mut recorded = 0;
        for scan in SCANS {
            let mut after = None;
            loop {
                let (page, last, read) = self.hand_edits_page(scan, since, until, after).await?;
                let fresh: Vec<(Seen, u64, NaiveDateTime)> = page
                    .iter()
                    .map(|(row, at)| (row.clone(), row.fingerprint(), *at))
                    .filter(|(_, print, _)| !checked.rows.contains_key(print))
                    .collect();
                let rows: Vec<Seen> = fresh.iter().map(|(row, ..)| row.clone()).collect();
                let edits = self.hand_edits_among(&rows).await?;
                fail_point_pause!("hand-edits-read");
                recorded += self.hand_edits_record(&edits).await?;
                for (row, print, at) in fresh {
                    if !edits.iter().any(|edit| edit.id == row.id) {
                        checked.rows.insert(print, at);
                    }
                }
                if read < PAGE as usize {
                    break;
                }
                after = last;
            }
        }
        Ok(recorded)
    }

    /// A page of the rows `scan` finds changed in [`since`, `until`),
    /// after `after` (its column's value and id); the last one's key; and
    /// how many rows the page read. A row whose values do not decode (a
    /// zero date written under a lax `sql_mode`) is logged and left out:
    /// it costs that row, never the pass.
    async fn hand_edits_page(
        &self,
        scan: Scan,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        after: Option<(NaiveDateTime, JobId)>,
    ) -> Result<
        (
            Vec<(Seen, NaiveDateTime)>,
            Option<(NaiveDateTime, JobId)>,
            usize,
        ),
        StoreError,
    > {
        let (column, index) = match scan {
            Scan::Live => ("changed_at", "ix_jobs_changed"),
            Scan::Finished(_) => ("status_at", "ix_jobs_status_at"),
        };
        // The index named: for columns beyond it MariaDB took
        // `(status, status_at)` by `status` alone and read every row of
        // the status before the range, page after page (31 ms a page of
        // 500 against 1.5 ms, after a 50,000-job burst).
        let mut select = QueryBuilder::<MySql>::new(format!(
            "SELECT id, CAST(status AS CHAR) AS status, schedule_time, attempt, updated_at, \
             event_token, {column} AS at FROM jobs FORCE INDEX ({index}) WHERE "
        ));
        // A range of an index: `changed_at`'s, or `(status, status_at)`'s
        // within one status.
        if let Scan::Finished(status) = scan {
            select.push("status = ").push_bind(status).push(" AND ");
        }
        // From the last page's key on, so the range starts there: an `OR`
        // alone would have each page read the index from `since` again.
        let from = after.map_or(db_time(since), |(at, _)| at);
        select
            .push(column)
            .push(" >= ")
            .push_bind(from)
            .push(format!(" AND {column} < "))
            .push_bind(db_time(until));
        if let Some((at, id)) = after {
            select
                .push(format!(" AND ({column} > "))
                .push_bind(at)
                .push(format!(" OR ({column} = "))
                .push_bind(at)
                .push(" AND id > ")
                .push_bind(id)
                .push("))");
        }
        select
            .push(format!(" ORDER BY {column}, id LIMIT "))
            .push_bind(PAGE);
        let rows = select.build().fetch_all(&self.pool).await?;
        let mut last = None;
        let mut seen = Vec::with_capacity(rows.len());
        for row in &rows {
            // The key: within the range just bound, so always a date.
            let id: JobId = row.try_get("id")?;
            let at: NaiveDateTime = row.try_get("at")?;
            last = Some((at, id));
            let read = (|| -> Result<Seen, sqlx::Error> {
                let status: Vec<u8> = row.try_get("status")?;
                Ok(Seen {
                    id,
                    status: String::from_utf8_lossy(&status).into_owned(),
                    schedule_time: row.try_get("schedule_time")?,
                    attempt: row.try_get("attempt")?,
                    updated_at: row.try_get("updated_at")?,
                    event_token: row.try_get("event_token")?,
                })
            })();
            match read {
                Ok(read) => seen.push((read, at)),
                Err(err) => tracing::warn!(
                    job = id,
                    error = %err,
                    "a changed row does not decode: not compared with its history"
                ),
            }
        }
        Ok((seen, last, rows.len()))
    }

    /// The rows of `seen` that are not what their last history row says.
    async fn hand_edits_among(&self, seen: &[Seen]) -> Result<Vec<Seen>, StoreError> {
        if seen.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<JobId> = seen.iter().map(|row| row.id).collect();
        // Each job's last history row, by `(job_id, id)` alone (no row
        // read), then those rows by their key: half the rows read of all
        // the jobs' history, which a dispatched job has two of.
        let mut newest = QueryBuilder::<MySql>::new(
            // id-order: a job's history rows in the order they were
            // written, as `job_history` reads them (each is written in the
            // transaction that holds the job's row).
            "SELECT MAX(id) FROM job_events WHERE job_id IN ",
        );
        push_id_list(&mut newest, &ids);
        newest.push(" GROUP BY job_id");
        let newest: Vec<u64> = newest.build_query_scalar().fetch_all(&self.pool).await?;
        let mut rows: Vec<(JobId, Vec<u8>, NaiveDateTime, u32)> = Vec::new();
        if !newest.is_empty() {
            let mut query = QueryBuilder::<MySql>::new(
                "SELECT job_id, CAST(status AS CHAR), schedule_time, attempt FROM job_events \
                 WHERE id IN ",
            );
            push_id_list(&mut query, &newest);
            rows = query.build_query_as().fetch_all(&self.pool).await?;
        }
        let mut last: HashMap<JobId, Recorded> = HashMap::with_capacity(seen.len());
        for (id, status, at, attempt) in rows {
            last.insert(
                id,
                (String::from_utf8_lossy(&status).into_owned(), at, attempt),
            );
        }
        Ok(seen
            .iter()
            .filter(|row| edited(row, last.get(&row.id)))
            .cloned()
            .collect())
    }

    /// Records `edits` as actor `sql`, each only if its row is still as
    /// read. Returns how many it recorded.
    ///
    /// Crash after the UPDATE, before the COMMIT: nothing is written; the
    /// next pass reads the rows again.
    async fn hand_edits_record(&self, edits: &[Seen]) -> Result<u64, StoreError> {
        if edits.is_empty() {
            return Ok(0);
        }
        let token = event_token();
        let ids: Vec<JobId> = edits.iter().map(|row| row.id).collect();
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin().await?;
        // `updated_at` kept: the edit's time stays the row's.
        let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
        update
            .push_bind(token)
            .push(", updated_at = updated_at WHERE id IN ");
        push_id_list(&mut update, &ids);
        update.push(" AND (id, status, schedule_time, attempt, updated_at, event_token) IN (");
        let mut rows = update.separated(", ");
        for row in edits {
            rows.push("(")
                .push_bind_unseparated(row.id)
                .push_unseparated(", ")
                .push_bind_unseparated(row.status.as_str())
                .push_unseparated(", ")
                .push_bind_unseparated(row.schedule_time)
                .push_unseparated(", ")
                .push_bind_unseparated(row.attempt)
                .push_unseparated(", ")
                .push_bind_unseparated(row.updated_at)
                .push_unseparated(", ")
                .push_bind_unseparated(row.event_token)
                .push_unseparated(")");
        }
        update.push(")");
        if update.build().execute(&mut *tx).await?.rows_affected() == 0 {
            return Ok(0);
        }
        let mut select = QueryBuilder::<MySql>::new(
            "SELECT id, CAST(status AS CHAR), schedule_time, attempt, updated_at FROM jobs \
             WHERE event_token = ",
        );
        select.push_bind(token).push(" AND id IN ");
        push_id_list(&mut select, &ids);
        let won: Vec<(JobId, Vec<u8>, NaiveDateTime, u32, NaiveDateTime)> =
            select.build_query_as().fetch_all(&mut *tx).await?;
        let mut insert = QueryBuilder::<MySql>::new(
            "INSERT INTO job_events (job_id, at, actor, status, schedule_time, attempt) ",
        );
        insert.push_values(&won, |mut row, (id, status, at, attempt, updated_at)| {
            // A row claimed since the edit: the history never says
            // `dispatching` (the claim is not recorded), and the edit left
            // it pending.
            let status = match String::from_utf8_lossy(status).into_owned() {
                claimed if claimed == "dispatching" => "pending".to_owned(),
                status => status,
            };
            row.push_bind(*id)
                .push_bind(*updated_at)
                .push_bind("sql")
                .push_bind(status)
                .push_bind(*at)
                .push_bind(*attempt);
        });
        insert.build().execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(won.len() as u64)
    }
}

/// Whether `row` is not what its last history row (`last`, none for a row
/// without history) says: a hand edit. A `dispatching` row is compared by
/// its time and attempt only: tickler's claim is not recorded.
fn edited(row: &Seen, last: Option<&Recorded>) -> bool {
    let Some((status, at, attempt)) = last else {
        return true;
    };
    let moved = row.schedule_time != *at || row.attempt != *attempt;
    moved || (row.status != *status && row.status != "dispatching")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(status: &str, at: NaiveDateTime, attempt: u32) -> Seen {
        Seen {
            id: 1,
            status: status.to_owned(),
            schedule_time: at,
            attempt,
            updated_at: at,
            event_token: 0,
        }
    }

    #[test]
    fn a_row_is_a_hand_edit_when_its_history_says_otherwise() {
        let at = db_time(DateTime::from_timestamp(1_800_000_000, 0).unwrap());
        let later = at + chrono::Duration::seconds(60);
        let pending = ("pending".to_owned(), at, 1);
        assert!(!edited(&seen("pending", at, 1), Some(&pending)));
        assert!(edited(&seen("dead", at, 1), Some(&pending)), "status");
        assert!(edited(&seen("pending", later, 1), Some(&pending)), "time");
        assert!(edited(&seen("pending", at, 2), Some(&pending)), "attempt");
        assert!(
            edited(&seen("pending", at, 1), None),
            "no history: inserted by hand"
        );
        // The claim is tickler's, and unrecorded.
        assert!(!edited(&seen("dispatching", at, 1), Some(&pending)));
        assert!(edited(&seen("dispatching", later, 1), Some(&pending)));
    }
}
