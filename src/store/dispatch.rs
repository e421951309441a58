//! The dispatch path's statements on `jobs`: the reads that feed the
//! window (the loader's, the overdue probe's), the claim's compare-and-set,
//! the mark of what was produced, claims in doubt and how they are settled
//! (including the rescue of a dead instance's claims), expiry and release.
//! The fence and who is alive are cluster.rs's; the API's reads and writes
//! of a job are in jobs.rs; how a row is read, in job_row.rs.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

use super::cluster::{push_alive_since_own, push_fence, Fence};
use super::error::StoreError;
use super::handle::Store;
use super::history::{event_token, events_insert_rows, events_record, EventRow};
use super::job_row::{job_from_row, text, WindowEntry, JOB_COLUMNS, UNREADABLE_PREFIX};
use super::sql::{db_time, micros, push_id_list};
use crate::domain::job::{Job, JobId, Status};

/// The claim columns of a job no claim holds, as a release puts them back:
/// the placeholders a job is created with (the columns' defaults since
/// V37), of the size the claim writes, so that a claim overwrites them in
/// place and the row keeps its size and its place in its page. They mean
/// "no claim", as NULL does (no instance has id 0, no claim token 0, and a
/// lease that ended in 1970 has ended); the mark sets the four to NULL,
/// which makes room for the position it writes.
pub(super) const CLAIM_NONE: &str = "claim_token = 0, claimed_by = 0, \
     claimed_at = '1970-01-01 00:00:00.000', claim_expires_at = '1970-01-01 00:00:00.000'";

/// What the claim compare-and-set made of the ids the index suggested.
#[derive(Debug, Default)]
pub struct ClaimOutcome {
    /// Jobs this claim won: now `dispatching` under its token.
    pub won: Vec<Job>,
    /// Ids still `pending` but not yet due by the database's clock (moved
    /// later by hand, or clocks apart): they go back to the index.
    pub not_due: Vec<WindowEntry>,
    /// Ids whose row is gone or no longer `pending` (cancelled, already
    /// dispatched, claimed elsewhere): stale index entries.
    pub stale: Vec<JobId>,
    /// Ids still `pending` that this claim could not take because its
    /// fence failed: the instance lost a shard's lease (or was declared
    /// dead) since it claimed them in Redis. They belong to the shard's
    /// new owner.
    pub fenced: Vec<JobId>,
    /// Ids still `pending` and due, but past their `expires_at`: to be
    /// cancelled, never produced.
    pub expired: Vec<JobId>,
    /// Ids still `pending` whose topic is paused: out of the index until
    /// the topic resumes.
    pub paused: Vec<JobId>,
    /// Ids this claim won whose row does not decode (a hand edit such as
    /// `headers = '7'`), with why: set aside as `dead`, never sent.
    pub unreadable: Vec<(JobId, String)>,
    /// The database's clock when the claim was decided.
    pub db_now: Option<DateTime<Utc>>,
}

/// What marking a claim's jobs did.
#[derive(Debug, Default)]
pub struct Marked {
    /// Rows marked (or, when a report came first, whose position was
    /// recorded).
    pub marked: u64,
    /// Jobs a report sent back to `pending` before the mark: Redis already
    /// holds them at their retry time, so their entries must stay.
    pub retried_early: Vec<JobId>,
}

/// A claim whose outcome is unknown, to be read back from Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doubt {
    pub id: JobId,
    pub topic: String,
    pub attempt: u32,
    /// The claim's token (None only for rows set `dispatching` by hand).
    pub token: Option<u64>,
    /// No record of this claim can be older than this (database clock).
    pub since: DateTime<Utc>,
    pub schedule_time: DateTime<Utc>,
}

/// A job produced to Kafka, ready to be marked.
#[derive(Debug, Clone, Copy)]
pub struct Dispatched {
    pub id: JobId,
    /// The claim that produced it.
    pub token: u64,
    pub partition: i32,
    pub offset: i64,
    pub dispatched_at: DateTime<Utc>,
    /// The row's time and attempt as claimed: what its history row says
    /// when every row of a mark matched.
    pub schedule_time: DateTime<Utc>,
    pub attempt: u32,
}

impl Store {
    /// Pending jobs changed at or after `since` (by hand, rescheduled,
    /// requeued, released) — not freshly inserted ones — due before
    /// `until`, in (`updated_at`, id) order after `after`. Returns them with
    /// the position of the last one, for paging (one bulk UPDATE gives many
    /// rows the same `updated_at`).
    pub async fn job_list_edited(
        &self,
        since: DateTime<Utc>,
        after: Option<(DateTime<Utc>, JobId)>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<(Vec<WindowEntry>, Option<(DateTime<Utc>, JobId)>), StoreError> {
        // `changed_at` (V31) is NULL for a job as it was inserted: the
        // range holds only rows changed since, however many were created.
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, schedule_time, changed_at FROM jobs WHERE status = 'pending' \
             AND schedule_time < ",
        );
        query.push_bind(db_time(until));
        query.push(" AND changed_at >= ").push_bind(db_time(since));
        if let Some((at, id)) = after {
            query
                .push(" AND (changed_at > ")
                .push_bind(db_time(at))
                .push(" OR (changed_at = ")
                .push_bind(db_time(at))
                .push(" AND id > ")
                .push_bind(id)
                .push("))");
        }
        query
            .push(" ORDER BY changed_at, id LIMIT ")
            .push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        let mut last = None;
        let entries = rows
            .iter()
            .map(|row| {
                let entry = WindowEntry::from_row(row)?;
                let updated: NaiveDateTime = row.try_get("changed_at")?;
                last = Some((updated.and_utc(), entry.id));
                Ok(entry)
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((entries, last))
    }

    /// Pending jobs with `from <= schedule_time < until` (no lower bound when
    /// `from` is None), in (schedule_time, id) order, starting after `after`.
    /// A range scan of `ix_jobs_status_at` (`status_at` is `schedule_time`
    /// while pending, V34): far-future rows are never read. Serves the loader (jobs entering the window) and the
    /// reconciler's overdue probe.
    pub async fn job_list_pending(
        &self,
        from: Option<DateTime<Utc>>,
        until: DateTime<Utc>,
        after: Option<WindowEntry>,
        limit: u32,
    ) -> Result<Vec<WindowEntry>, StoreError> {
        self.job_list_pending_where(from, until, after, limit, false)
            .await
    }

    /// [`Store::job_list_pending`] without the jobs of paused topics (they
    /// are kept out of the index until their topic resumes): the overdue
    /// probe's.
    pub async fn job_list_overdue(
        &self,
        until: DateTime<Utc>,
        after: Option<WindowEntry>,
        limit: u32,
    ) -> Result<Vec<WindowEntry>, StoreError> {
        self.job_list_pending_where(None, until, after, limit, true)
            .await
    }

    async fn job_list_pending_where(
        &self,
        from: Option<DateTime<Utc>>,
        until: DateTime<Utc>,
        after: Option<WindowEntry>,
        limit: u32,
        skip_paused: bool,
    ) -> Result<Vec<WindowEntry>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, status_at AS schedule_time FROM jobs WHERE status = 'pending' AND status_at < ",
        );
        query.push_bind(db_time(until));
        if skip_paused {
            query.push(" AND topic NOT IN (SELECT topic FROM topic_controls WHERE paused)");
        }
        if from.is_none() {
            // Held jobs (overdue by nature) stay out of the index until
            // released; a scan from a lower bound on sees none, as they
            // were held when due, so it keeps to its covering index.
            query.push(" AND held_at IS NULL");
        }
        if let Some(from) = from {
            query.push(" AND status_at >= ").push_bind(db_time(from));
        }
        if let Some(after) = after {
            let at = db_time(after.schedule_time);
            query
                .push(" AND (status_at > ")
                .push_bind(at)
                .push(" OR (status_at = ")
                .push_bind(at)
                .push(" AND id > ")
                .push_bind(after.id)
                .push("))");
        }
        query
            .push(" ORDER BY status_at, id LIMIT ")
            .push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter().map(WindowEntry::from_row).collect()
    }

    /// The claim compare-and-set: `pending → dispatching` for those of `ids`
    /// that are pending and due by the database's clock, under `token`, with
    /// a lease of `lease` — provided `fence` holds (the instance is alive and
    /// owns the ids' shards at the epochs it acquired them with), so an
    /// instance that lost its shards while paused sends nothing. The fence
    /// is read right after the write (a write names `jobs` alone, #62), and
    /// what the write won is given back unsent when it does not hold.
    /// Returns what became of every id.
    ///
    /// Crash after the UPDATE commits: the rows stay `dispatching` under the
    /// instance; once it is dead (heartbeat past the TTL) they are put in
    /// doubt and read back (the claim lease is the backstop), found absent,
    /// and produced.
    pub async fn job_claim_many(
        &self,
        ids: &[JobId],
        token: u64,
        lease: Duration,
        fence: &Fence,
    ) -> Result<ClaimOutcome, StoreError> {
        self.job_claim_many_with(ids, token, lease, fence, true, Duration::ZERO)
            .await
    }

    /// [`Store::job_claim_many`], checking paused topics only when
    /// `paused_check`, and taking jobs due within `lookahead` of the
    /// database's clock (the dispatcher holds them until their time; the
    /// outcome's `db_now` tells it where the database's clock stood).
    ///
    /// The pause check costs the compare-and-set about a quarter of its
    /// speed (a subquery per statement on MariaDB), so the dispatcher leaves
    /// it out while its copy of the controls is fresh and names no paused
    /// topic (see `topic_controls::TopicControls::claim_checks_pauses`).
    ///
    /// Long because it is one compare-and-set transaction with its read-back:
    /// the UPDATE and the rows it won share the connection and the locks.
    pub async fn job_claim_many_with(
        &self,
        ids: &[JobId],
        token: u64,
        lease: Duration,
        fence: &Fence,
        paused_check: bool,
        lookahead: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        if ids.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        let lease_us = u64::try_from(lease.as_micros()).unwrap_or(u64::MAX);
        let lookahead_us = u64::try_from(lookahead.as_micros()).unwrap_or(u64::MAX);
        // One index entry moves, the job's in `ix_jobs_status_at` (V35):
        // `status_at` stays `schedule_time`, and `updated_at` is kept as it
        // was (`claimed_at` says when), so `changed_at` (V31) stays NULL
        // for a job as created. The mark moves that entry once more. The
        // claim columns overwrite their placeholders ([`CLAIM_NONE`]), so
        // the row does not grow.
        // By the primary key whatever the statistics say: on a table whose
        // statistics lag its rows (a fresh one, one just filled) the
        // optimizer takes a claim of thousands of ids for most of the table
        // and scans all of it, once per claim (a 50,000-job burst on a new
        // table read 50,000 rows for every 8,000 claimed).
        let mut update = QueryBuilder::<MySql>::new(
            "UPDATE jobs FORCE INDEX (PRIMARY) SET status = 'dispatching', version = version % 4294967295 + 1, \
             updated_at = updated_at, claim_token = ",
        );
        update
            .push_bind(token)
            .push(", claimed_by = ")
            .push_bind(fence.instance)
            .push(", claimed_at = UTC_TIMESTAMP(3), claim_expires_at = TIMESTAMPADD(MICROSECOND, ")
            .push_bind(lease_us)
            .push(
                ", UTC_TIMESTAMP(3)) WHERE status = 'pending' \
                 AND schedule_time <= TIMESTAMPADD(MICROSECOND, ",
            )
            .push_bind(lookahead_us)
            .push(
                ", UTC_TIMESTAMP(3)) \
                 AND (expires_at IS NULL OR expires_at > UTC_TIMESTAMP(3) OR attempt > 1) \
                 AND held_at IS NULL AND ",
            );
        if paused_check {
            // Read, then bound: a write names no other table (#62). A
            // pause committed between the two is missed as one committed
            // just after the claim would be.
            let paused: Vec<Vec<u8>> =
                sqlx::query_scalar("SELECT topic FROM topic_controls WHERE paused")
                    .fetch_all(&self.pool)
                    .await?;
            if !paused.is_empty() {
                update.push("topic NOT IN (");
                let mut list = update.separated(", ");
                for topic in paused {
                    list.push_bind(topic);
                }
                update.push(") AND ");
            }
        }
        // The fence is checked by the read-back, after the write, and what
        // the write won is given back when it does not hold (below).
        update.push("id IN ");
        push_id_list(&mut update, ids);

        let mut select = claim_read_back(ids, fence, paused_check);

        // The UPDATE commits on its own: a transaction around it and the
        // SELECT would hold the claimed rows' locks for as long as this
        // process is paused between the two, and stop every other writer
        // of them (until #62 the fence was a subquery of the UPDATE, whose
        // locks on `shard_leases` and `instances` then stopped every
        // heartbeat and takeover: the fault suite's pause test hung on
        // it). The fence is read by the SELECT, after the write, so it is
        // never older than the claim. Both run on one connection;
        // if the SELECT fails, what this claim won was never seen, so
        // nothing was sent: released at once by its token, not left for
        // the lease.
        let mut conn = self.pool.acquire().await?;
        update.build().execute(&mut *conn).await?;
        fail_point_pause!("claim-written");
        let rows = match select.build().fetch_all(&mut *conn).await {
            Ok(rows) => rows,
            Err(err) => {
                drop(conn);
                if let Err(release) = self
                    .job_release_many(token, ids, "claim not read back; released unsent")
                    .await
                {
                    tracing::warn!(error = %release, "cannot release a claim whose read failed; its lease will");
                }
                return Err(err.into());
            }
        };
        // The fence, read after the write: when it does not hold (this
        // instance was taken for dead, or lost a shard, before or while it
        // claimed), what the write won is given back unsent.
        let fence_failed = rows.iter().any(|row| {
            row.try_get::<i64, _>("fence_holds")
                .map_or(true, |holds| holds == 0)
        });
        if fence_failed {
            let won: Vec<JobId> = rows
                .iter()
                .filter(|row| {
                    text(row, "status").ok().flatten().as_deref() == Some("dispatching")
                        && row.try_get::<Option<u64>, _>("claim_token").ok().flatten()
                            == Some(token)
                })
                .filter_map(|row| row.try_get("id").ok())
                .collect();
            // Failing, the rows stay this claim's, unsent: put in doubt
            // with this instance's other claims, or read back after the
            // lease, found absent, and produced.
            claim_undo(&mut conn, token, fence.instance, &won).await?;
        }

        let mut dicts_refreshed = false;
        let mut dicts_loaded = false;
        let mut outcome = ClaimOutcome::default();
        let mut deferred: Vec<(JobId, String)> = Vec::new();
        let mut keys_held: std::collections::HashMap<String, bool> = Default::default();
        let mut seen = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: JobId = row.try_get("id")?;
            let status = text(row, "status")?.unwrap_or_default();
            let schedule_time: NaiveDateTime = row.try_get("schedule_time")?;
            let schedule_time = schedule_time.and_utc();
            let claimed_by: Option<u64> = row.try_get("claim_token")?;
            let db_now: NaiveDateTime = row.try_get("db_now")?;
            let fence_holds: i64 = row.try_get("fence_holds")?;
            let expired: i64 = row.try_get("expired")?;
            let paused: i64 = row.try_get("paused")?;
            let held_back: i64 = row.try_get("held")?;
            outcome.db_now = Some(db_now.and_utc());
            seen.push(id);
            match status.as_str() {
                // Decoded one by one: a row this claim won that does not
                // decode (a hand edit the column accepted) is set aside
                // below, and never holds up the others.
                // Won while the fence did not hold, and given back.
                "dispatching" if claimed_by == Some(token) && fence_failed => {
                    outcome.fenced.push(id)
                }
                "dispatching" if claimed_by == Some(token) => {
                    let mut decoded = job_from_row(row, &self.keys, &self.codec);
                    if matches!(decoded, Err(StoreError::DictionaryUnknown(_))) && !dicts_refreshed
                    {
                        // A dictionary made since the last refresh: loaded now.
                        dicts_refreshed = true;
                        match self.dicts_refresh().await {
                            Ok(()) => dicts_loaded = true,
                            Err(err) => {
                                tracing::warn!(error = %err, "cannot load payload dictionaries")
                            }
                        }
                    }
                    if dicts_refreshed && matches!(decoded, Err(StoreError::DictionaryUnknown(_))) {
                        decoded = job_from_row(row, &self.keys, &self.codec);
                        if dicts_loaded {
                            // Still unknown once loaded afresh: not in the
                            // table, a broken row.
                            decoded = decoded.map_err(super::jobs::dictionary_absent(row));
                        }
                    }
                    match decoded {
                        Ok(job) => outcome.won.push(job),
                        // Not a broken row: released, and claimed again
                        // once the dictionary is loaded.
                        Err(StoreError::DictionaryUnknown(dict)) => {
                            deferred.push((id, format!("payload dictionary {dict}")))
                        }
                        Err(err @ StoreError::KeyMissing { .. }) => {
                            let StoreError::KeyMissing { ref key, .. } = err else {
                                unreachable!("matched above")
                            };
                            // Left to an instance that holds the key, if
                            // one is live; set aside only when none is.
                            let held = match keys_held.get(key) {
                                Some(held) => *held,
                                None => {
                                    let held =
                                        self.key_held_live(key, fence.ttl).await.unwrap_or(true);
                                    keys_held.insert(key.clone(), held);
                                    held
                                }
                            };
                            if held {
                                deferred.push((id, format!("encryption key {key:?}")));
                            } else {
                                outcome.unreadable.push((id, err.to_string()));
                            }
                        }
                        Err(err) => outcome.unreadable.push((id, err.to_string())),
                    }
                }
                // Held (its payload failed its topic's schema): out of the
                // index until released, like any stale entry.
                "pending" if held_back != 0 => outcome.stale.push(id),
                "pending" if fence_holds == 0 => outcome.fenced.push(id),
                "pending" if paused != 0 => outcome.paused.push(id),
                "pending" if expired != 0 && schedule_time <= db_now.and_utc() => {
                    outcome.expired.push(id)
                }
                "pending" => outcome.not_due.push(WindowEntry { id, schedule_time }),
                _ => outcome.stale.push(id),
            }
        }
        if !deferred.is_empty() {
            let ids: Vec<JobId> = deferred.iter().map(|(id, _)| *id).collect();
            tracing::warn!(jobs = ?deferred, "rows this instance cannot open yet (a payload dictionary not loaded, or a key another live instance holds); released unsent");
            drop(conn);
            // Failing, the claim's lease releases them: the jobs won are
            // sent all the same. The index's claim of them lapses and
            // brings them back after the lease: a wait, not a hot loop.
            if let Err(err) = self
                .job_release_many(
                    token,
                    &ids,
                    "not readable by the instance that claimed it (a payload dictionary not loaded yet, or sealed under a key it lacks that another live instance holds); released unsent",
                )
                .await
            {
                tracing::warn!(error = %err, "cannot release jobs whose dictionary is not loaded; their lease will");
            }
            conn = self.pool.acquire().await?;
        }
        if !outcome.unreadable.is_empty() {
            // All of the pass's in one statement and one commit: each
            // broken row costs the jobs claimed beside it no round trip.
            // Crash before this: the rows are dispatching under this
            // claim, never sent; after the lease they are read back, found
            // absent, claimed again, and set aside then.
            let errors: Vec<(JobId, String)> = outcome
                .unreadable
                .iter()
                .map(|(id, reason)| {
                    (
                        *id,
                        format!(
                            "{UNREADABLE_PREFIX}{reason}; repair the row by hand, then redrive it"
                        ),
                    )
                })
                .collect();
            let event = event_token();
            // Each row's error by a CASE on its id: a pass has few.
            let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
            update.push_bind(event).push(
                ", status = 'dead', version = version % 4294967295 + 1, \
                 claim_token = NULL, claimed_by = NULL, claimed_at = NULL, \
                 claim_expires_at = NULL, last_error = CASE id",
            );
            for (id, error) in &errors {
                update
                    .push(" WHEN ")
                    .push_bind(*id)
                    .push(" THEN ")
                    .push_bind(error.as_str());
            }
            let ids: Vec<JobId> = errors.iter().map(|(id, _)| *id).collect();
            update
                .push(" END WHERE status = 'dispatching' AND claim_token = ")
                .push_bind(token)
                .push(" AND id IN ");
            push_id_list(&mut update, &ids);
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            update.build().execute(&mut *tx).await?;
            events_record(&mut tx, &self.actor, &ids, event).await?;
            tx.commit().await?;
        }
        outcome
            .stale
            .extend(ids.iter().filter(|id| !seen.contains(id)));
        Ok(outcome)
    }

    /// `dispatching → dispatched` for jobs their claims produced, recording
    /// where each record landed. Returns how many rows were marked (a row
    /// not marked lost its claim meanwhile: lease expired and settled by
    /// reading back), and
    /// which a consumer's report already sent back to `pending` for a retry.
    ///
    /// Crash before this commits: the records are on Kafka but the rows are
    /// `dispatching`; after the lease (or the instance's death) the
    /// reconciler reads the topic back, finds them, and marks them here.
    pub async fn job_mark_dispatched_many(
        &self,
        jobs: &[Dispatched],
    ) -> Result<Marked, StoreError> {
        // In id order, the order reports lock rows in, so the two do not
        // deadlock.
        let mut jobs = jobs.to_vec();
        jobs.sort_unstable_by_key(|job| job.id);
        // The rows of one claim sent at one instant together (a paced
        // topic's claim goes out tick by tick): each such group is marked by
        // the primary key with its token and time bound once. Rows of
        // groups too small to be worth a statement of their own are marked
        // together, each row's values by a CASE on its id.
        let mut groups: std::collections::BTreeMap<(u64, DateTime<Utc>), Vec<Dispatched>> =
            std::collections::BTreeMap::new();
        for job in jobs {
            groups
                .entry((job.token, job.dispatched_at))
                .or_default()
                .push(job);
        }
        let mut marked = Marked::default();
        let mut scattered = Vec::new();
        for group in groups.into_values() {
            if group.len() >= GROUP_MIN {
                self.mark_rows(&group, &mut marked).await?;
            } else {
                scattered.extend(group);
            }
        }
        scattered.sort_unstable_by_key(|job| job.id);
        self.mark_rows(&scattered, &mut marked).await?;
        Ok(marked)
    }

    /// Marks `jobs` (in id order) dispatched, a statement a chunk.
    ///
    /// Long because it is the mark's one UPDATE, built for a chunk of one
    /// claim and instant or of scattered rows, and its history.
    async fn mark_rows(&self, jobs: &[Dispatched], marked: &mut Marked) -> Result<(), StoreError> {
        // One UPDATE of `jobs` alone per chunk (#62).
        const CHUNK: usize = 1000;
        let mut next = 0;
        while next < jobs.len() {
            let token = event_token();
            // A chunk of one claim sent at one instant (as a pass's are)
            // binds its token and time once (#61). Its positions are then
            // runs of consecutive offsets, each row's offset its run's
            // first plus its place in it: by the primary key, without a
            // value per row (a derived table joined to `jobs` cost a
            // quarter of the mark's time). Otherwise (a reconciler
            // settling several claims, offsets scattered) each row's
            // values come from a CASE on its id, a scan of the list per
            // row: such chunks are cut at `CHUNK_SCATTERED` rows.
            let wide = &jobs[next..(next + CHUNK).min(jobs.len())];
            let runs = shared_claim(wide).and_then(|_| PositionRuns::of(wide));
            let chunk = match runs {
                Some(_) => wide,
                None => &wide[..wide.len().min(CHUNK_SCATTERED)],
            };
            next += chunk.len();
            let shared = shared_claim(chunk);
            let at = match shared {
                Some((_, at)) => SentAt::Shared(db_time(at)),
                None => SentAt::Each(chunk),
            };
            let mut query = match &runs {
                Some(runs) => {
                    let mut query = QueryBuilder::<MySql>::new(
                        "UPDATE jobs j FORCE INDEX (PRIMARY) SET j.kafka_partition = ",
                    );
                    runs.push_partition(&mut query);
                    query.push(", j.kafka_offset = ");
                    runs.push_offset(&mut query);
                    query.push(", ");
                    query
                }
                None => {
                    let mut query = QueryBuilder::<MySql>::new(
                        "UPDATE jobs j FORCE INDEX (PRIMARY) SET j.kafka_partition = ",
                    );
                    push_case_by_id(&mut query, chunk, |query, job| {
                        query.push_bind(job.partition);
                    });
                    query.push(", j.kafka_offset = ");
                    push_case_by_id(&mut query, chunk, |query, job| {
                        query.push_bind(job.offset);
                    });
                    query.push(", ");
                    query
                }
            };
            // A job expecting a result waits for it until the ack
            // deadline, counted on the database's clock.
            query.push("j.event_token = ").push_bind(token).push(
                ", j.status = 'dispatched', j.version = j.version % 4294967295 + 1, \
                     j.claim_token = NULL, j.claimed_by = NULL, j.claim_expires_at = NULL, \
                     j.claimed_at = NULL, j.dispatched_at = ",
            );
            push_sent_at(&mut query, &at);
            query.push(
                ", j.verified_at = NULL, \
                     j.ack_deadline = IF(j.expects_result, \
                       TIMESTAMPADD(MICROSECOND, j.ack_timeout_ms * 1000, UTC_TIMESTAMP(3)), NULL), \
                     j.last_error = IF(j.window_ms IS NOT NULL AND ",
            );
            push_sent_at(&mut query, &at);
            query.push(
                " > TIMESTAMPADD(MICROSECOND, j.window_ms * 1000, j.window_start), \
                       CONCAT('produced ', TIMESTAMPDIFF(MICROSECOND, \
                         TIMESTAMPADD(MICROSECOND, j.window_ms * 1000, j.window_start), ",
            );
            push_sent_at(&mut query, &at);
            query.push(
                ") DIV 1000, ' ms after its window ended'), j.last_error) \
                     WHERE j.status = 'dispatching' AND COALESCE(j.claim_token, 0) = ",
            );
            match shared {
                Some((claim, _)) => {
                    query.push_bind(claim);
                }
                None => push_case_by_id(&mut query, chunk, |query, job| {
                    query.push_bind(job.token);
                }),
            };
            let ids: Vec<JobId> = chunk.iter().map(|job| job.id).collect();
            query.push(" AND j.id IN ");
            match &runs {
                Some(runs) => push_id_list(&mut query, &runs.ids),
                None => push_id_list(&mut query, &ids),
            }
            let mut tx = self.begin().await?;
            let chunk_marked = query.build().execute(&mut *tx).await?.rows_affected();
            if chunk_marked == chunk.len() as u64 {
                // Every row matched its claim: their history rows are known
                // without reading them again.
                let done: Vec<EventRow> = chunk
                    .iter()
                    .map(|job| {
                        let status = Status::Dispatched.as_str().to_owned();
                        (job.id, status, db_time(job.schedule_time), job.attempt)
                    })
                    .collect();
                events_insert_rows(&mut tx, &self.actor, &done).await?;
            } else {
                events_record(&mut tx, &self.actor, &ids, token).await?;
            }
            tx.commit().await?;
            marked.marked += chunk_marked;
            if chunk_marked < chunk.len() as u64 {
                self.job_mark_settled_early(chunk, marked).await?;
            }
        }
        Ok(())
    }

    /// Records where the records of these claims landed for jobs a
    /// consumer's report settled before the dispatcher marked them (the
    /// report keeps the claim token for this). Their status is the report's.
    async fn job_mark_settled_early(
        &self,
        jobs: &[Dispatched],
        marked: &mut Marked,
    ) -> Result<(), StoreError> {
        // A row set `dispatching` by hand ([`CLAIM_NONE`]) was no claim of
        // tickler's: no report holds its token.
        let jobs: Vec<Dispatched> = jobs.iter().filter(|job| job.token != 0).copied().collect();
        if jobs.is_empty() {
            return Ok(());
        }
        let jobs = jobs.as_slice();
        let ids: Vec<JobId> = jobs.iter().map(|job| job.id).collect();
        let mut retried = QueryBuilder::<MySql>::new(
            "SELECT id, claim_token FROM jobs WHERE status = 'pending' AND id IN ",
        );
        push_id_list(&mut retried, &ids);
        let retried: Vec<(JobId, Option<u64>)> =
            retried.build_query_as().fetch_all(&self.pool).await?;
        marked
            .retried_early
            .extend(retried.into_iter().filter_map(|(id, token)| {
                jobs.iter()
                    .any(|job| job.id == id && Some(job.token) == token)
                    .then_some(id)
            }));
        for chunk in jobs.chunks(CHUNK_SCATTERED) {
            let mut query = QueryBuilder::<MySql>::new(
                "UPDATE jobs j SET j.claim_token = NULL, j.claimed_by = NULL, \
                 j.claim_expires_at = NULL, j.verified_at = NULL, j.dispatched_at = ",
            );
            push_sent_at(&mut query, &SentAt::Each(chunk));
            query.push(", j.kafka_partition = ");
            push_case_by_id(&mut query, chunk, |query, job| {
                query.push_bind(job.partition);
            });
            query.push(", j.kafka_offset = ");
            push_case_by_id(&mut query, chunk, |query, job| {
                query.push_bind(job.offset);
            });
            query.push(" WHERE j.status <> 'dispatching' AND j.claim_token = ");
            push_case_by_id(&mut query, chunk, |query, job| {
                query.push_bind(job.token);
            });
            let ids: Vec<JobId> = chunk.iter().map(|job| job.id).collect();
            query.push(" AND j.id IN ");
            push_id_list(&mut query, &ids);
            marked.marked += query.build().execute(&self.pool).await?.rows_affected();
        }
        Ok(())
    }

    /// Claims whose outcome is to be found out now: rows `dispatching`
    /// whose lease (or, for a claim already in doubt, its quiet time)
    /// expired by the database's clock, or which have none (set
    /// `dispatching` by hand). Their record may or may not be on
    /// Kafka; the reconciler reads their topics back to tell, and until it
    /// has, a cancel answers `in_flight`. Oldest first.
    pub async fn job_doubts_due(&self, limit: u32) -> Result<Vec<Doubt>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {DOUBT_COLUMNS} FROM jobs WHERE status = 'dispatching' \
             AND (claim_expires_at < UTC_TIMESTAMP(3) OR claim_expires_at IS NULL) \
             ORDER BY claim_expires_at LIMIT ?"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(doubt_from_row).collect()
    }

    /// The topics that have claims to be found out now (as
    /// [`Store::job_doubts_due`] means it), each with how many, the topic
    /// with the oldest first (rows set `dispatching` by hand, which have no
    /// quiet time, before all). A reader takes topics in this order, so
    /// that one topic's many doubts never keep another's from being read.
    pub async fn job_doubt_topics(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT topic, COUNT(*) AS n, MIN(COALESCE(claim_expires_at, '1000-01-01')) AS oldest \
             FROM jobs WHERE status = 'dispatching' \
             AND (claim_expires_at < UTC_TIMESTAMP(3) OR claim_expires_at IS NULL) \
             GROUP BY topic ORDER BY oldest, topic",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let n: i64 = row.try_get("n")?;
                Ok((
                    text(row, "topic")?.unwrap_or_default(),
                    u64::try_from(n).unwrap_or_default(),
                ))
            })
            .collect()
    }

    /// [`Store::job_doubts_due`] of one topic.
    pub async fn job_doubts_due_on(
        &self,
        topic: &str,
        limit: u32,
    ) -> Result<Vec<Doubt>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {DOUBT_COLUMNS} FROM jobs WHERE status = 'dispatching' AND topic = ? \
             AND (claim_expires_at < UTC_TIMESTAMP(3) OR claim_expires_at IS NULL) \
             ORDER BY claim_expires_at LIMIT ?"
        ))
        .bind(topic)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(doubt_from_row).collect()
    }

    /// Puts claims in doubt: their records were handed to the broker and
    /// their fate is unknown (the send timed out, the broker connection
    /// failed mid-request). The rows stay `dispatching` — a cancel answers
    /// `in_flight`, a PATCH is refused — until the reconciler has read the
    /// topic back, no sooner than `quiet` from now (by when the producer has
    /// given up on them and the broker has taken what was on the wire).
    /// The claim keeps its token: a late acknowledgement still marks it.
    ///
    /// Crash after this commits: the reconciler settles them as for a dead
    /// instance's claims.
    pub async fn job_doubt_many(
        &self,
        token: u64,
        ids: &[JobId],
        error: &str,
        quiet: Duration,
    ) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let quiet_us = u64::try_from(quiet.as_micros()).unwrap_or(u64::MAX);
        let mut query = QueryBuilder::<MySql>::new(
            "UPDATE jobs SET claimed_by = NULL, claim_expires_at = LEAST(COALESCE(claim_expires_at, \
             TIMESTAMPADD(MICROSECOND, ",
        );
        // (LEAST of a NULL is NULL: a row without a lease gets the quiet
        // time itself.)
        query
            .push_bind(quiet_us)
            .push(", UTC_TIMESTAMP(3))), TIMESTAMPADD(MICROSECOND, ")
            .push_bind(quiet_us)
            .push(", UTC_TIMESTAMP(3))), last_error = ")
            .push_bind(error)
            .push(" WHERE status = 'dispatching' AND claim_token = ")
            .push_bind(token)
            .push(" AND id IN ");
        push_id_list(&mut query, ids);
        Ok(query.build().execute(&self.pool).await?.rows_affected())
    }

    /// `dispatching → pending` for claims in doubt whose record the
    /// reconciler did not find on Kafka once nothing more of them could
    /// arrive: they are produced again (same attempt; `last_error` keeps
    /// why). Returns those it moved, to be indexed.
    ///
    /// Crash after this commits: the rows are pending and overdue; the
    /// overdue probe indexes them.
    pub async fn job_doubt_absent(&self, doubts: &[Doubt]) -> Result<Vec<WindowEntry>, StoreError> {
        let mut moved = Vec::new();
        for doubt in doubts {
            let token = event_token();
            let mut tx = self.begin().await?;
            // `last_error` before the claim columns: a single-table
            // UPDATE assigns left to right, and it reads `claimed_by`.
            let done = sqlx::query(&format!(
                "UPDATE jobs SET event_token = ?, status = 'pending', version = version % 4294967295 + 1, \
                 last_error = IF(COALESCE(claimed_by, 0) = 0, last_error, \
                   'claim expired: the dispatcher died, stalled or lost its mark; not found on kafka, produced again'), \
                 {CLAIM_NONE} \
                 WHERE id = ? AND status = 'dispatching' AND COALESCE(claim_token, 0) = COALESCE(?, 0) \
                 AND (claim_expires_at < UTC_TIMESTAMP(3) OR claim_expires_at IS NULL)",
            ))
            .bind(token)
            .bind(doubt.id)
            .bind(doubt.token)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            events_record(&mut tx, &self.actor, &[doubt.id], token).await?;
            tx.commit().await?;
            if done == 1 {
                moved.push(WindowEntry {
                    id: doubt.id,
                    schedule_time: doubt.schedule_time,
                });
            }
        }
        Ok(moved)
    }

    /// Puts the claims of instance `id`, whose process is known to have
    /// exited (its pid gone from its host), in doubt for `quiet` from now:
    /// a process that exited hands nothing more to a producer, so only what
    /// was already on the wire can still become visible — the margin, not
    /// the message timeout. Returns how many rows it put in doubt.
    ///
    /// Crash after this commits: the rows are in doubt; any reconciler
    /// settles them.
    pub async fn job_rescue_exited(
        &self,
        id: u64,
        quiet: Duration,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let ids: Vec<u64> = sqlx::query_scalar(
            "SELECT id FROM jobs WHERE status = 'dispatching' AND claimed_by = ? LIMIT ?",
        )
        .bind(id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        if ids.is_empty() {
            return Ok(0);
        }
        let token = event_token();
        let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
        update
            .push_bind(token)
            .push(
                ", claim_expires_at = LEAST(COALESCE(claim_expires_at, \
                 TIMESTAMPADD(MICROSECOND, ",
            )
            .push_bind(micros(quiet))
            .push(", UTC_TIMESTAMP(3))), TIMESTAMPADD(MICROSECOND, ")
            .push_bind(micros(quiet))
            .push(
                ", UTC_TIMESTAMP(3))), \
                 last_error = CONCAT('claimed by instance ', claimed_by, \
                 ', which died (its process exited); its topic is read back before the job is produced again'), \
                 claimed_by = NULL WHERE status = 'dispatching' AND claimed_by = ",
            )
            .push_bind(id)
            .push(" AND id IN ");
        push_id_list(&mut update, &ids);
        self.rescue_apply(update, &ids, token).await
    }

    /// Puts the claims of instances dead by the database's clock
    /// (heartbeat older than their own TTL — `ttl` for rows that name none
    /// — or no row at all) in doubt, at once rather than after the claim
    /// lease: a dead instance may have handed their records to the broker,
    /// or (paused, not dead) may still. It hands nothing to its producer
    /// once three quarters of its TTL have passed since its last heartbeat
    /// (`Releaser`), nor ever again a claim from before a lapse, and its
    /// producer gives up on a record `kafka.message_timeout_ms` after it
    /// was handed over; so after that and a margin (its quiet time,
    /// `quiet` from now for a row that names none) nothing of these claims
    /// can still arrive, and the reconciler reads their topics back to
    /// tell produced from not. Returns how many
    /// rows it put in doubt. Safe on several instances at once.
    ///
    /// Crash after this commits: the rows are in doubt; any reconciler
    /// settles them.
    pub async fn job_rescue_dead(
        &self,
        ttl: Duration,
        quiet: Duration,
        limit: u32,
    ) -> Result<u64, StoreError> {
        // The candidates first, by a plain read that locks nothing: an
        // UPDATE scanning every `dispatching` row would lock them all (and
        // the gaps between them) each round, on every instance, and
        // deadlock with the marks and claims taking the same rows by id.
        // `claimed_by > 0`: a row set `dispatching` by hand holds no
        // instance's claim (NULL, or the placeholder 0 it was created
        // with: see `CLAIM_NONE`); the doubts take it as it is.
        let mut select = QueryBuilder::<MySql>::new(
            "SELECT id, claim_token, claimed_by FROM jobs WHERE status = 'dispatching' \
             AND claimed_by > 0 \
             AND claimed_by NOT IN (SELECT id FROM instances WHERE heartbeat_at >= ",
        );
        push_alive_since_own(&mut select, ttl);
        select.push(") LIMIT ").push_bind(limit);
        let found: Vec<(u64, Option<u64>, u64)> =
            select.build_query_as().fetch_all(&self.pool).await?;
        if found.is_empty() {
            return Ok(0);
        }
        let ids: Vec<u64> = found.iter().map(|(id, _, _)| *id).collect();
        let mut dead: Vec<u64> = found.iter().map(|(_, _, by)| *by).collect();
        dead.sort_unstable();
        dead.dedup();
        // When nothing of a dead instance's claims can still become
        // visible, by its own row: it handed nothing to its producer after
        // three quarters of its TTL past its last heartbeat (`Releaser`),
        // and its producer gives up on a record its quiet time (message
        // timeout and margin) after it was handed over. A row from before
        // V39 (no settings), or none at all (it left, or was forgotten):
        // `quiet` from now. Read here, and bound into the write (#62: a
        // write names `jobs` alone).
        let mut ends = QueryBuilder::<MySql>::new(
            "SELECT id, TIMESTAMPADD(MICROSECOND, ttl_ms * 750 + quiet_ms * 1000, heartbeat_at) \
             FROM instances WHERE ttl_ms IS NOT NULL AND quiet_ms IS NOT NULL AND id IN ",
        );
        push_id_list(&mut ends, &dead);
        let ends: Vec<(u64, Option<NaiveDateTime>)> =
            ends.build_query_as().fetch_all(&self.pool).await?;
        let known: Vec<(u64, NaiveDateTime)> = ends
            .iter()
            .filter_map(|(id, end)| Some((*id, (*end)?)))
            .collect();
        let push_quiet_end = |update: &mut QueryBuilder<'_, MySql>| {
            if !known.is_empty() {
                update.push("CASE claimed_by");
                for (id, end) in &known {
                    let (id, end) = (*id, *end);
                    update
                        .push(" WHEN ")
                        .push_bind(id)
                        .push(" THEN ")
                        .push_bind(end);
                }
                update.push(" ELSE ");
            }
            update
                .push("TIMESTAMPADD(MICROSECOND, ")
                .push_bind(micros(quiet))
                .push(", UTC_TIMESTAMP(3))");
            if !known.is_empty() {
                update.push(" END");
            }
        };
        fail_point_pause!("rescue-read");
        // Recorded in the jobs' history as the rescuer's (`membership`): the
        // moment the claim went in doubt.
        let token = event_token();
        let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
        // (LEAST of a NULL is NULL: a row without a lease gets the quiet
        // end itself.) Assigned before `claimed_by` is cleared (a
        // single-table UPDATE assigns left to right).
        update
            .push_bind(token)
            .push(", claim_expires_at = LEAST(COALESCE(claim_expires_at, ");
        push_quiet_end(&mut update);
        update.push("), ");
        push_quiet_end(&mut update);
        // Each row still the claim the read saw, of an instance it read as
        // dead (a compare-and-set on the claim's token: a claim the
        // instance made since, alive again, is not put in doubt).
        update.push(
            "), \
                 last_error = CONCAT('claimed by instance ', claimed_by, \
                 ', which died; its topic is read back before the job is produced again'), \
                 claimed_by = NULL WHERE status = 'dispatching' AND claimed_by IN ",
        );
        push_id_list(&mut update, &dead);
        update.push(" AND id IN ");
        push_id_list(&mut update, &ids);
        update.push(" AND (id, COALESCE(claim_token, 0)) IN (");
        let mut rows = update.separated(", ");
        for (id, claim, _) in &found {
            rows.push("(")
                .push_bind_unseparated(*id)
                .push_unseparated(", ")
                .push_bind_unseparated(claim.unwrap_or(0))
                .push_unseparated(")");
        }
        update.push(")");
        self.rescue_apply(update, &ids, token).await
    }

    /// Runs a rescue's UPDATE of `ids` (stamped with the history `token`)
    /// and records the rows it put in doubt, as this handle's actor, in one
    /// transaction. Returns how many it changed.
    async fn rescue_apply(
        &self,
        mut update: QueryBuilder<'_, MySql>,
        ids: &[u64],
        token: u64,
    ) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        let rescued = update.build().execute(&mut *tx).await?.rows_affected();
        events_record(&mut tx, &self.actor, ids, token).await?;
        tx.commit().await?;
        Ok(rescued)
    }

    /// `pending → expired` for jobs past their `expires_at` (set on create,
    /// or a `skip` schedule's occurrence that could not be produced within
    /// its misfire grace). Only a first attempt expires: a job produced once
    /// was delivered, and a retry its consumer asked for runs late.
    /// Returns how many expired.
    pub async fn job_expire_many(&self, ids: &[JobId]) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let token = event_token();
        let mut query = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
        query.push_bind(token).push(
            ", status = 'expired', version = version % 4294967295 + 1, \
             last_error = IF(schedule_id IS NULL, 'expired: not produced by its expires_at', \
             'expired: not produced within its schedule''s misfire grace (misfire = skip)') \
             WHERE status = 'pending' AND expires_at <= UTC_TIMESTAMP(3) AND attempt = 1 AND id IN ",
        );
        push_id_list(&mut query, ids);
        let mut tx = self.begin().await?;
        let expired = query.build().execute(&mut *tx).await?.rows_affected();
        events_record(&mut tx, &self.actor, ids, token).await?;
        tx.commit().await?;
        Ok(expired)
    }

    /// `dispatching → pending` for jobs this claim could not produce (the
    /// broker refused or timed out), so they are tried again. The attempt is
    /// not counted: nothing was delivered.
    pub async fn job_release_many(
        &self,
        token: u64,
        ids: &[JobId],
        error: &str,
    ) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let event = event_token();
        let mut query = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
        query
            .push_bind(event)
            .push(", status = 'pending', version = version % 4294967295 + 1, ")
            .push(CLAIM_NONE)
            .push(", last_error = ");
        query
            .push_bind(error)
            .push(" WHERE status = 'dispatching' AND claim_token = ")
            .push_bind(token)
            .push(" AND id IN ");
        push_id_list(&mut query, ids);
        let mut tx = self.begin().await?;
        let released = query.build().execute(&mut *tx).await?.rows_affected();
        events_record(&mut tx, &self.actor, ids, event).await?;
        tx.commit().await?;
        Ok(released)
    }
}

/// The claim's read-back: each row of `ids` as the claim left it, whether
/// `fence` holds now (read after the write, so never older than it), and
/// why a row still pending was not won. A read: its subqueries lock
/// nothing and are no write's.
fn claim_read_back<'a>(
    ids: &'a [JobId],
    fence: &'a Fence,
    paused_check: bool,
) -> QueryBuilder<'a, MySql> {
    let mut select = QueryBuilder::<MySql>::new(format!(
        "SELECT {JOB_COLUMNS}, claim_token, UTC_TIMESTAMP(3) AS db_now, "
    ));
    push_fence(&mut select, fence);
    select.push(
        " AS fence_holds, COALESCE(expires_at <= UTC_TIMESTAMP(3) AND attempt = 1, FALSE) AS expired, \
         held_at IS NOT NULL AS held, ",
    );
    select.push(if paused_check {
        "topic IN (SELECT topic FROM topic_controls WHERE paused)"
    } else {
        "FALSE"
    });
    // By the primary key too: past `in_predicate_conversion_threshold`
    // (1,000 ids) MariaDB joins the list as a table of values, and on a
    // table whose statistics lag its rows it read all of `jobs` for it
    // (#61: 6 rows examined per job claimed in the bench's burst).
    select.push(" AS paused FROM jobs FORCE INDEX (PRIMARY) WHERE id IN ");
    push_id_list(&mut select, ids);
    select
}

/// Gives back what a claim under `token` won while its fence did not hold:
/// pending again, as it was before the claim (`updated_at` kept, no
/// history: the claim was never recorded either). Only rows still this
/// instance's: one membership has put in doubt meanwhile (`claimed_by`
/// NULL) is the reconciler's to settle.
///
/// Crash after this commits: the jobs are pending, in the index for the
/// shard's owner, which claims them.
async fn claim_undo(
    conn: &mut sqlx::MySqlConnection,
    token: u64,
    instance: u64,
    ids: &[JobId],
) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let mut undo = QueryBuilder::<MySql>::new(
        "UPDATE jobs SET status = 'pending', version = version % 4294967295 + 1, \
         updated_at = updated_at, ",
    );
    undo.push(CLAIM_NONE)
        .push(" WHERE status = 'dispatching' AND claim_token = ")
        .push_bind(token)
        .push(" AND claimed_by = ")
        .push_bind(instance)
        .push(" AND id IN ");
    push_id_list(&mut undo, ids);
    Ok(undo.build().execute(&mut *conn).await?.rows_affected())
}

/// The claim token and send time every job of `jobs` shares, if they do.
fn shared_claim(jobs: &[Dispatched]) -> Option<(u64, DateTime<Utc>)> {
    let first = jobs.first()?;
    jobs.iter()
        .all(|job| job.token == first.token && job.dispatched_at == first.dispatched_at)
        .then_some((first.token, first.dispatched_at))
}

/// The rows of a mark whose positions are not runs of one claim: each
/// row's values come from a CASE on its id.
const CHUNK_SCATTERED: usize = 100;

/// The fewest rows of one claim and instant marked by a statement of their
/// own.
const GROUP_MIN: usize = 8;

/// The send time in a mark: one shared by the chunk, or each row's own.
enum SentAt<'a> {
    Shared(NaiveDateTime),
    Each(&'a [Dispatched]),
}

/// The send time in the mark: bound once, or a CASE on the row's id.
fn push_sent_at(query: &mut QueryBuilder<'_, MySql>, at: &SentAt<'_>) {
    match at {
        SentAt::Shared(at) => {
            query.push_bind(*at);
        }
        SentAt::Each(jobs) => push_case_by_id(query, jobs, |query, job| {
            query.push_bind(db_time(job.dispatched_at));
        }),
    }
}

/// `CASE j.id WHEN <id> THEN <value> … END` over `jobs`, each value pushed
/// by `value`.
fn push_case_by_id(
    query: &mut QueryBuilder<'_, MySql>,
    jobs: &[Dispatched],
    mut value: impl FnMut(&mut QueryBuilder<'_, MySql>, &Dispatched),
) {
    query.push("CASE j.id");
    for job in jobs {
        query.push(" WHEN ").push_bind(job.id).push(" THEN ");
        value(query, job);
    }
    query.push(" END");
}

/// The positions of a mark's rows as runs of consecutive offsets in one
/// partition, for a single-table UPDATE: `kafka_partition` by which
/// partition's id list holds the row, `kafka_offset` as its run's first
/// offset plus its place in the run (`FIELD`, a scan of the run's ids: runs
/// are cut at [`PositionRuns::RUN_MAX`] to bound it). A producer gives one
/// partition's records of a batch consecutive offsets, so a pass's chunk
/// is a few runs per partition.
#[derive(Debug, PartialEq, Eq)]
struct PositionRuns {
    /// Every row's id, in id order.
    ids: Vec<JobId>,
    /// Each partition with its rows' ids (in id order).
    partitions: Vec<(i32, Vec<JobId>)>,
    /// Each run: its first offset, and its rows' ids in offset order.
    runs: Vec<(i64, Vec<JobId>)>,
}

impl PositionRuns {
    /// Ids a run's `FIELD` scans at most.
    const RUN_MAX: usize = 256;
    /// Runs past which the derived table is the cheaper form (each row
    /// tests the runs before its own).
    const RUNS_MAX: usize = 32;

    /// The runs of `jobs`, or `None` when they do not make a few (offsets
    /// scattered among other producers' records), name an id twice, or
    /// hold an offset the broker did not give (negative: none known),
    /// which the joined form records as it is.
    fn of(jobs: &[Dispatched]) -> Option<Self> {
        if jobs.iter().any(|job| job.offset < 0) {
            return None;
        }
        let mut ids: Vec<JobId> = jobs.iter().map(|job| job.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|pair| pair[0] == pair[1]) {
            return None;
        }
        let mut by_position: Vec<&Dispatched> = jobs.iter().collect();
        by_position.sort_unstable_by_key(|job| (job.partition, job.offset));
        let mut partitions: Vec<(i32, Vec<JobId>)> = Vec::new();
        let mut runs: Vec<(i64, Vec<JobId>)> = Vec::new();
        let mut last: Option<(i32, i64)> = None;
        for job in by_position {
            match partitions.last_mut() {
                Some((partition, ids)) if *partition == job.partition => ids.push(job.id),
                _ => partitions.push((job.partition, vec![job.id])),
            }
            let follows = last == Some((job.partition, job.offset.wrapping_sub(1)));
            match runs.last_mut() {
                Some((_, run)) if follows && run.len() < Self::RUN_MAX => run.push(job.id),
                _ => runs.push((job.offset, vec![job.id])),
            }
            if runs.len() > Self::RUNS_MAX {
                return None;
            }
            last = Some((job.partition, job.offset));
        }
        for (_, ids) in &mut partitions {
            ids.sort_unstable();
        }
        Some(Self {
            ids,
            partitions,
            runs,
        })
    }

    fn push_partition(&self, query: &mut QueryBuilder<'_, MySql>) {
        if let [(partition, _)] = self.partitions.as_slice() {
            query.push_bind(*partition);
            return;
        }
        query.push("CASE");
        for (partition, ids) in &self.partitions {
            query.push(" WHEN j.id IN ");
            push_id_list(query, ids);
            query.push(" THEN ").push_bind(*partition);
        }
        query.push(" END");
    }

    fn push_offset(&self, query: &mut QueryBuilder<'_, MySql>) {
        // FIELD counts from 1: a run's offsets are its first - 1 + FIELD.
        let run = |query: &mut QueryBuilder<'_, MySql>, (first, ids): &(i64, Vec<JobId>)| {
            query.push_bind(first - 1).push(" + FIELD(j.id, ");
            let mut list = query.separated(", ");
            for id in ids {
                list.push_bind(*id);
            }
            query.push(")");
        };
        if let [only] = self.runs.as_slice() {
            run(query, only);
            return;
        }
        query.push("CASE");
        for each in &self.runs {
            query.push(" WHEN j.id IN ");
            push_id_list(query, &each.1);
            query.push(" THEN ");
            run(query, each);
        }
        query.push(" END");
    }
}

const DOUBT_COLUMNS: &str = "id, topic, attempt, claim_token, claimed_at, schedule_time";

fn doubt_from_row(row: &MySqlRow) -> Result<Doubt, StoreError> {
    let claimed_at: Option<NaiveDateTime> = row.try_get("claimed_at")?;
    let scheduled: NaiveDateTime = row.try_get("schedule_time")?;
    Ok(Doubt {
        id: row.try_get("id")?,
        topic: text(row, "topic")?.unwrap_or_default(),
        attempt: row.try_get("attempt")?,
        // A row set `dispatching` by hand holds no claim: a NULL token, or
        // the placeholder 0 (`CLAIM_NONE`).
        token: row
            .try_get::<Option<u64>, _>("claim_token")?
            .filter(|token| *token != 0),
        // A record is stamped no earlier than its claim, nor than its
        // schedule (claims made before V22 have no claimed_at).
        since: claimed_at
            .map_or(scheduled, |at| at.max(scheduled))
            .and_utc(),
        schedule_time: scheduled.and_utc(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(id: JobId, token: u64, at_ms: i64) -> Dispatched {
        let at = DateTime::from_timestamp_millis(at_ms).unwrap();
        Dispatched {
            id,
            token,
            partition: 0,
            offset: id as i64,
            dispatched_at: at,
            schedule_time: at,
            attempt: 1,
        }
    }

    fn at(id: JobId, partition: i32, offset: i64) -> Dispatched {
        Dispatched {
            partition,
            offset,
            ..sent(id, 7, 1_000)
        }
    }

    #[test]
    fn a_marks_positions_are_runs_of_consecutive_offsets_per_partition() {
        // Partition 0 takes 9, 3, 5 at 10, 11, 12; partition 1 takes 4 at 7
        // and 8 at 9 (another producer's record at 8 between them).
        let runs = PositionRuns::of(&[
            at(3, 0, 11),
            at(4, 1, 7),
            at(5, 0, 12),
            at(8, 1, 9),
            at(9, 0, 10),
        ])
        .unwrap();
        assert_eq!(runs.ids, vec![3, 4, 5, 8, 9]);
        assert_eq!(runs.partitions, vec![(0, vec![3, 5, 9]), (1, vec![4, 8])]);
        assert_eq!(
            runs.runs,
            vec![(10, vec![9, 3, 5]), (7, vec![4]), (9, vec![8])]
        );
    }

    #[test]
    fn a_mark_cuts_long_runs_and_leaves_scattered_or_repeated_rows_to_the_join() {
        let long: Vec<Dispatched> = (0..600).map(|n| at(n + 1, 2, 1_000 + n as i64)).collect();
        let runs = PositionRuns::of(&long).unwrap();
        let lengths: Vec<(i64, usize)> = runs
            .runs
            .iter()
            .map(|(first, ids)| (*first, ids.len()))
            .collect();
        assert_eq!(lengths, vec![(1_000, 256), (1_256, 256), (1_512, 88)]);
        let scattered: Vec<Dispatched> = (0..40).map(|n| at(n + 1, 0, 2 * n as i64)).collect();
        assert_eq!(PositionRuns::of(&scattered), None);
        assert_eq!(PositionRuns::of(&[at(1, 0, 5), at(1, 0, 6)]), None);
        assert_eq!(PositionRuns::of(&[at(1, 0, -1), at(2, 0, 0)]), None);
        assert_eq!(PositionRuns::of(&[at(1, 0, i64::MIN)]), None);
    }

    #[test]
    fn a_mark_binds_the_claim_once_only_when_every_row_shares_it() {
        let at = DateTime::from_timestamp_millis(1_000).unwrap();
        assert_eq!(
            shared_claim(&[sent(1, 7, 1_000), sent(2, 7, 1_000)]),
            Some((7, at))
        );
        assert_eq!(shared_claim(&[sent(1, 7, 1_000), sent(2, 8, 1_000)]), None);
        assert_eq!(shared_claim(&[sent(1, 7, 1_000), sent(2, 7, 1_001)]), None);
        assert_eq!(shared_claim(&[]), None);
    }
}
