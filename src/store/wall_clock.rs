//! Wall-clock jobs' statements (#60): the pending rows whose instant was
//! computed with an older tzdata release, found by `ix_jobs_tzdata` without
//! reading any other job, and the release stamped on those a newer one
//! leaves where they are. A row whose instant changes is moved through the
//! jobs service (`Jobs::modify`), like any change of a job's time.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::error::StoreError;
use super::handle::Store;
use super::job_row::text;
use super::sql::push_id_list;
use crate::domain::job::JobId;
use crate::domain::zones::WallClock;

/// A pending wall-clock job of an older release: what computing its
/// instant again needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WallRow {
    pub id: JobId,
    pub version: u32,
    pub attempt: u32,
    pub schedule_time: DateTime<Utc>,
    pub window_ms: Option<u32>,
    pub window_start: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Whether it is a schedule's occurrence (its expiry is then the
    /// schedule's misfire grace, counted from its time).
    pub occurrence: bool,
    /// None when its columns, or its times, do not decode (a hand edit):
    /// left alone.
    pub wall: Option<WallClock>,
    /// As stored (`0` for none): where the scan goes on from.
    pub tzdata_version: String,
}

impl Store {
    /// Up to `limit` pending wall-clock jobs whose release is older than
    /// `version`, after `after` (a release and an id) in the index's order.
    /// Rows that left pending are passed over, not returned. A row without
    /// a release but with a zone (written by hand) is none of them: it has
    /// no instant computed to compare (docs/operations.md says to give it
    /// `tzdata_version = '0'`).
    pub async fn job_wall_stale(
        &self,
        version: &str,
        after: Option<(&str, JobId)>,
        limit: u32,
    ) -> Result<Vec<WallRow>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, version, attempt, schedule_time, window_ms, window_start, expires_at, \
             schedule_id IS NOT NULL AS occurrence, run_local, time_zone, tzdata_version \
             FROM jobs WHERE tzdata_version < ",
        );
        query.push_bind(version.to_owned());
        if let Some((release, id)) = after {
            query
                .push(" AND (tzdata_version > ")
                .push_bind(release.to_owned())
                .push(" OR (tzdata_version = ")
                .push_bind(release.to_owned())
                .push(" AND id > ")
                .push_bind(id)
                .push("))");
        }
        // id-order: a cursor over (release, id), the index's own order;
        // nothing depends on which rows come first.
        query
            .push(" AND status = 'pending' ORDER BY tzdata_version, id LIMIT ")
            .push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                // A time that does not decode (a zero date written by hand)
                // costs its row: it is left at its instant, never moved from
                // a guess, and the page goes on.
                let at = |column: &str| -> Result<Option<DateTime<Utc>>, ()> {
                    row.try_get::<Option<NaiveDateTime>, _>(column)
                        .map(|at| at.map(|at| at.and_utc()))
                        .map_err(|_| ())
                };
                let (schedule_time, window_start, expires_at) =
                    (at("schedule_time"), at("window_start"), at("expires_at"));
                let times_read = matches!(schedule_time, Ok(Some(_)))
                    && window_start.is_ok()
                    && expires_at.is_ok();
                let tzdata_version = text(row, "tzdata_version")?.unwrap_or_default();
                let local: Option<NaiveDateTime> = row.try_get("run_local").ok().flatten();
                let zone = text(row, "time_zone").ok().flatten();
                Ok(WallRow {
                    id: row.try_get("id")?,
                    version: row.try_get("version")?,
                    attempt: row.try_get("attempt")?,
                    schedule_time: schedule_time.ok().flatten().unwrap_or_default(),
                    window_ms: row.try_get("window_ms")?,
                    window_start: window_start.ok().flatten(),
                    expires_at: expires_at.ok().flatten(),
                    occurrence: row.try_get::<i64, _>("occurrence")? != 0,
                    wall: local
                        .zip(zone)
                        .filter(|_| times_read)
                        .map(|(local, zone)| WallClock {
                            local,
                            zone,
                            tzdata_version: tzdata_version.clone(),
                        }),
                    tzdata_version,
                })
            })
            .collect()
    }

    /// Stamps release `version` on pending jobs among `ids` still of an
    /// older one: computed again under it, their instant is unchanged.
    /// Their `version` and `updated_at` stay: nothing a caller or the
    /// loader reads changed. Returns how many rows it stamped.
    ///
    /// Crash before this commits: the rows keep their older release and
    /// are computed again by the next scan, with the same answer.
    pub async fn job_wall_stamp(&self, ids: &[JobId], version: &str) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut query = QueryBuilder::<MySql>::new("UPDATE jobs SET tzdata_version = ");
        query
            .push_bind(version.to_owned())
            .push(", updated_at = updated_at WHERE status = 'pending' AND tzdata_version < ")
            .push_bind(version.to_owned())
            .push(" AND id IN ");
        push_id_list(&mut query, ids);
        Ok(query.build().execute(&self.pool).await?.rows_affected())
    }
}
