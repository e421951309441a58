//! The store's methods on `schedules` (src/store/schedules.rs) and the
//! occurrences they create as jobs: what each answers, what it leaves in the
//! schedule's row and in its occurrences, and what it leaves alone. The
//! planning rules themselves (src/domain/schedule.rs) have unit tests of their own;
//! here, that the store applies a plan and keeps its progress; and the gaps
//! a pause or a misfire policy leaves, as the audit reads them.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Duration as Span, Utc};
use tickler::domain::fires::{self, FireOutcome};
use tickler::domain::job::{JobId, NewJob, PayloadKind, Schedule, Status};
use tickler::domain::policy::Policy;
use tickler::domain::schedule::{occurrence_key, Misfire};
use tickler::store::{
    Actor, BatchRow, NewSchedule, PendingOccurrences, ScheduleDef, ScheduleRow, ScheduleStatus,
    ScheduleUpdate, StoreError, TopicChange,
};
use tickler_testkit::store::{job_new, Db};

const HOUR_MS: u64 = 3_600_000;

/// Every `every_ms` from `start_at`, fire_once, a minute's grace.
fn every(every_ms: u64, start_at: DateTime<Utc>) -> ScheduleDef {
    ScheduleDef {
        payload: b"{\"tick\":true}".to_vec(),
        payload_kind: PayloadKind::Json,
        headers: BTreeMap::from([("origin".to_owned(), "schedule".to_owned())]),
        policy: Policy {
            expects_result: true,
            max_attempts: 2,
            ..Policy::default()
        },
        cron: None,
        time_zone: None,
        every_ms: Some(every_ms),
        start_at,
        end_at: None,
        max_occurrences: None,
        misfire: Misfire::FireOnce,
        misfire_grace_ms: 60_000,
        window_ms: None,
        jitter_ms: None,
    }
}

fn schedule_new(topic: &str, key: &str, def: ScheduleDef) -> NewSchedule {
    NewSchedule {
        topic: topic.to_owned(),
        key: key.to_owned(),
        def,
        created_by: "api:alice".to_owned(),
    }
}

/// Inserts `def` as the API does: its next occurrence from now on.
async fn insert(db: &Db, topic: &str, key: &str, def: ScheduleDef) -> ScheduleRow {
    let now = db.store.db_now().await.unwrap();
    let next_at = def.first_after(now.max(def.start_at - Span::milliseconds(1)));
    db.store
        .schedule_insert(&schedule_new(topic, key, def), next_at)
        .await
        .unwrap()
}

/// An hourly schedule whose first occurrence is ten minutes away, with that
/// occurrence created.
async fn hourly_with_one_occurrence(db: &Db, key: &str) -> (ScheduleRow, JobId) {
    let start = db.store.db_now().await.unwrap() + Span::minutes(10);
    let row = insert(db, "ticks", key, every(HOUR_MS, start)).await;
    let done = db
        .store
        .schedule_materialize(row.id, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(done.created.len(), 1);
    (
        db.store.schedule_get(row.id).await.unwrap(),
        done.created[0].id,
    )
}

/// A job of schedule `id` with `key` due `in_ms` from now (inserted as
/// the materializer does: `job_insert` keeps no schedule id).
async fn occurrence(db: &Db, id: u64, key: &str, in_ms: i64) -> JobId {
    let job = NewJob {
        key: Some(key.to_owned()),
        schedule_id: Some(id),
        ..job_new("ticks", in_ms)
    };
    match &db.store.job_insert_many(&[job]).await.unwrap().0[0] {
        BatchRow::Created(job) => job.id,
        BatchRow::Duplicate => panic!("key {key} is taken"),
    }
}

async fn pending_ids(db: &Db, id: u64) -> Vec<JobId> {
    db.store
        .schedule_pending(id, 100)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect()
}

// ---------------------------------------------------------------------------
// insert, get, find_by_key, list

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_stores_the_definition_and_starts_active_or_ended() {
    let db = Db::new().await;
    let api = db.store_as(Actor::Api).with_actor("api:alice");
    let now = db.store.db_now().await.unwrap();
    let start = now + Span::minutes(10);
    let def = every(HOUR_MS, start);
    let row = api
        .schedule_insert(&schedule_new("ticks", "daily", def.clone()), Some(start))
        .await
        .unwrap();
    assert_eq!((row.topic.as_str(), row.key.as_str()), ("ticks", "daily"));
    assert_eq!(row.def, def);
    assert_eq!(
        (row.status, row.version, row.occurrences),
        (ScheduleStatus::Active, 1, 0)
    );
    assert_eq!(
        (row.cursor_at, row.next_at, row.last_at),
        (start - Span::milliseconds(1), Some(start), None),
        "nothing decided before its start"
    );
    assert_eq!(row.created_by, "api:alice");
    assert!(row.created_at >= now);
    let got = db.store.schedule_get(row.id).await.unwrap();
    assert_eq!(
        (got.def, got.version, got.cursor_at),
        (def.clone(), 1, row.cursor_at)
    );

    // A start in the past sets the phase, not a backlog: the cursor is now.
    let before = db.store.db_now().await.unwrap();
    let past = insert(&db, "ticks", "phased", every(HOUR_MS, now - Span::days(1))).await;
    assert!(past.cursor_at >= before);
    assert!(past.next_at.unwrap() > past.cursor_at);

    // A cron schedule in a zone of its own reads back as written.
    let cron = ScheduleDef {
        cron: Some("0 9 * * MON-FRI".to_owned()),
        time_zone: Some("Europe/Paris".to_owned()),
        every_ms: None,
        end_at: Some(start + Span::days(30)),
        max_occurrences: Some(10),
        misfire: Misfire::Skip,
        misfire_grace_ms: 5_000,
        ..def.clone()
    };
    let row_cron = insert(&db, "ticks", "weekdays", cron.clone()).await;
    assert_eq!(db.store.schedule_get(row_cron.id).await.unwrap().def, cron);

    let ended = api
        .schedule_insert(&schedule_new("ticks", "over", def.clone()), None)
        .await
        .unwrap();
    assert_eq!((ended.status, ended.next_at), (ScheduleStatus::Ended, None));

    assert!(matches!(
        api.schedule_insert(&schedule_new("ticks", "daily", def.clone()), Some(start))
            .await,
        Err(StoreError::DuplicateKey)
    ));
    let spaced = insert(&db, "ticks", "daily ", def.clone()).await;
    let elsewhere = insert(&db, "tocks", "daily", def.clone()).await;
    let find = |topic: &'static str, key: &'static str| {
        let store = db.store.clone();
        async move {
            store
                .schedule_find_by_key(topic, key)
                .await
                .unwrap()
                .map(|s| s.id)
        }
    };
    assert_eq!(find("ticks", "daily").await, Some(row.id));
    assert_eq!(find("ticks", "daily ").await, Some(spaced.id));
    assert_eq!(find("tocks", "daily").await, Some(elsewhere.id));
    assert_eq!(find("ticks", "weekly").await, None);
    assert!(matches!(
        db.store.schedule_get(404_404).await,
        Err(StoreError::NotFound(404_404))
    ));
    api.close().await;
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_by_id_and_filters_by_topic_status_and_patterns() {
    let db = Db::new().await;
    let start = db.store.db_now().await.unwrap() + Span::minutes(10);
    let a = insert(&db, "billing.eu", "a", every(HOUR_MS, start))
        .await
        .id;
    let b = insert(&db, "billing.us", "b", every(HOUR_MS, start))
        .await
        .id;
    let c = insert(&db, "billing_x", "c", every(HOUR_MS, start))
        .await
        .id;
    db.store.schedule_pause(b, true).await.unwrap();

    let list =
        |topic: Option<&'static str>, status, patterns: Option<Vec<String>>, after, limit| {
            let store = db.store.clone();
            async move {
                store
                    .schedule_list(topic, status, patterns.as_deref(), after, limit)
                    .await
                    .unwrap()
                    .iter()
                    .map(|s| s.id)
                    .collect::<Vec<_>>()
            }
        };
    assert_eq!(list(None, None, None, 0, 100).await, [a, b, c]);
    assert_eq!(list(None, None, None, 0, 2).await, [a, b]);
    assert_eq!(list(None, None, None, b, 2).await, [c]);
    assert_eq!(list(Some("billing.us"), None, None, 0, 100).await, [b]);
    assert_eq!(
        list(None, Some(ScheduleStatus::Paused), None, 0, 100).await,
        [b]
    );
    assert_eq!(
        list(None, Some(ScheduleStatus::Active), None, 0, 100).await,
        [a, c]
    );
    assert_eq!(
        list(None, None, Some(vec!["billing_*".to_owned()]), 0, 100).await,
        [c],
        "'_' in a pattern is itself"
    );
    assert_eq!(
        list(None, None, Some(vec!["billing.*".to_owned()]), 0, 100).await,
        [a, b]
    );
    assert!(list(None, None, Some(vec![]), 0, 100).await.is_empty());
    db.finish().await;
}

// ---------------------------------------------------------------------------
// due, materialize

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_lists_active_schedules_whose_latest_occurrence_is_within_the_lookahead() {
    let db = Db::new().await;
    let start = db.store.db_now().await.unwrap() + Span::minutes(10);
    let fresh = insert(&db, "ticks", "fresh", every(HOUR_MS, start))
        .await
        .id;
    let ahead = insert(&db, "ticks", "ahead", every(HOUR_MS, start))
        .await
        .id;
    db.edit(
        "UPDATE schedules SET last_at = UTC_TIMESTAMP(3) + INTERVAL 2 HOUR WHERE id = ?",
        ahead,
    )
    .await;
    let paused = insert(&db, "ticks", "paused", every(HOUR_MS, start))
        .await
        .id;
    db.store.schedule_pause(paused, true).await.unwrap();
    db.store
        .schedule_insert(&schedule_new("ticks", "ended", every(HOUR_MS, start)), None)
        .await
        .unwrap();

    let hours = |n: u64| Duration::from_secs(3_600 * n);
    assert_eq!(db.store.schedule_due(hours(1), 100).await.unwrap(), [fresh]);
    assert_eq!(
        db.store.schedule_due(hours(3), 100).await.unwrap(),
        [fresh, ahead],
        "those without an occurrence first"
    );
    assert_eq!(db.store.schedule_due(hours(3), 1).await.unwrap(), [fresh]);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn materialize_creates_the_next_occurrence_as_a_job_and_keeps_the_progress() {
    let db = Db::new().await;
    let scheduler = db.store_as(Actor::Scheduler);
    let start = db.store.db_now().await.unwrap() + Span::minutes(10);
    let def = every(HOUR_MS, start);
    let row = insert(&db, "ticks", "hourly", def.clone()).await;

    let done = scheduler
        .schedule_materialize(row.id, Duration::ZERO)
        .await
        .unwrap();
    assert!(done.db_now.is_some());
    assert_eq!((done.created.len(), done.skipped), (1, 0));
    let job = &done.created[0];
    assert_eq!(job.topic, "ticks");
    assert_eq!(
        job.key.as_deref(),
        Some(occurrence_key("hourly", start).as_str())
    );
    assert_eq!(
        (job.schedule_time, job.schedule_id, job.expires_at),
        (start, Some(row.id), None)
    );
    assert_eq!(
        (&job.payload, job.payload_kind, &job.headers, job.policy),
        (&def.payload, def.payload_kind, &def.headers, def.policy)
    );
    assert_eq!((job.status, job.attempt), (Status::Pending, 1));
    let history = db.store.job_history(job.id).await.unwrap();
    assert_eq!(history[0].actor, "scheduler");

    let after = db.store.schedule_get(row.id).await.unwrap();
    assert_eq!(
        (
            after.occurrences,
            after.last_at,
            after.cursor_at,
            after.next_at
        ),
        (1, Some(start), start, Some(start + Span::hours(1)))
    );
    assert_eq!(
        (after.status, after.version),
        (ScheduleStatus::Active, 1),
        "progress is not a change a client's version check sees"
    );

    let again = scheduler
        .schedule_materialize(row.id, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        again.created.is_empty(),
        "the next occurrence exists already"
    );

    // A longer lookahead creates what falls within it, and one beyond.
    let wider = scheduler
        .schedule_materialize(row.id, Duration::from_secs(3 * 3_600))
        .await
        .unwrap();
    let times: Vec<DateTime<Utc>> = wider.created.iter().map(|j| j.schedule_time).collect();
    assert_eq!(
        times,
        [1, 2, 3].map(|n| start + Span::hours(n)),
        "every hour up to the horizon, and the first past it"
    );
    let after = db.store.schedule_get(row.id).await.unwrap();
    assert_eq!(
        (after.occurrences, after.last_at),
        (4, Some(start + Span::hours(3)))
    );
    assert_eq!(pending_ids(&db, row.id).await.len(), 4);

    let missing = scheduler
        .schedule_materialize(404_404, Duration::ZERO)
        .await
        .unwrap();
    assert!(missing.created.is_empty() && missing.db_now.is_none());
    scheduler.close().await;
    db.finish().await;
}

/// A schedule stops at its bound; a paused one creates nothing; a skip
/// schedule's occurrences carry their expiry; an occurrence whose key is
/// taken is not created twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn materialize_keeps_bounds_pauses_expiries_and_taken_keys() {
    let db = Db::new().await;
    let start = db.store.db_now().await.unwrap() + Span::minutes(10);
    let three_hours = Duration::from_secs(3 * 3_600);

    let bounded = insert(
        &db,
        "ticks",
        "twice",
        ScheduleDef {
            max_occurrences: Some(2),
            ..every(HOUR_MS, start)
        },
    )
    .await;
    let done = db
        .store
        .schedule_materialize(bounded.id, three_hours)
        .await
        .unwrap();
    assert_eq!(done.created.len(), 2);
    let row = db.store.schedule_get(bounded.id).await.unwrap();
    assert_eq!(
        (row.status, row.next_at, row.occurrences),
        (ScheduleStatus::Ended, None, 2)
    );
    assert!(db
        .store
        .schedule_materialize(bounded.id, three_hours)
        .await
        .unwrap()
        .created
        .is_empty());

    let paused = insert(&db, "ticks", "paused", every(HOUR_MS, start)).await;
    db.store.schedule_pause(paused.id, true).await.unwrap();
    let done = db
        .store
        .schedule_materialize(paused.id, three_hours)
        .await
        .unwrap();
    assert!(done.created.is_empty() && done.db_now.is_some());

    let skipping = insert(
        &db,
        "ticks",
        "skipping",
        ScheduleDef {
            misfire: Misfire::Skip,
            misfire_grace_ms: 30_000,
            ..every(HOUR_MS, start)
        },
    )
    .await;
    let done = db
        .store
        .schedule_materialize(skipping.id, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        done.created[0].expires_at,
        Some(start + Span::seconds(30)),
        "not produced within its grace, it is cancelled"
    );

    let taken = insert(&db, "ticks", "taken", every(HOUR_MS, start)).await;
    let squatter = db
        .store
        .job_insert(&NewJob {
            key: Some(occurrence_key("taken", start)),
            ..job_new("ticks", 600_000)
        })
        .await
        .unwrap()
        .0;
    let done = db
        .store
        .schedule_materialize(taken.id, Duration::ZERO)
        .await
        .unwrap();
    assert!(done.created.is_empty(), "the occurrence's key is taken");
    let row = db.store.schedule_get(taken.id).await.unwrap();
    assert_eq!(
        (row.occurrences, row.last_at),
        (0, Some(start)),
        "decided, not counted"
    );
    assert_eq!(db.store.job_get(squatter.id).await.unwrap(), squatter);
    db.finish().await;
}

/// After an outage, fire_once creates one occurrence now for what was
/// missed — unless the occurrence created before the outage has not run
/// yet (still pending): that one, running late, is the firing. The store
/// reads that from the last occurrence's job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_once_after_an_outage_fires_once_unless_the_last_occurrence_is_still_waiting() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    // Occurrences every minute on the phase of `phase`; ten of them missed.
    let phase = now - Span::seconds(630);
    let minute = 60_000;
    let mut made = Vec::new();
    for (key, last_status) in [("ran", "dispatched"), ("waiting", "pending")] {
        let def = ScheduleDef {
            misfire_grace_ms: 1_000,
            ..every(minute, phase)
        };
        let row = insert(&db, "ticks", key, def).await;
        let last = db
            .store
            .job_insert(&NewJob {
                key: Some(occurrence_key(key, phase)),
                schedule: Schedule::At(phase),
                ..job_new("ticks", 0)
            })
            .await
            .unwrap()
            .0
            .id;
        // Produced on time (ran), or never (waiting).
        db.edit(
            &format!(
                "UPDATE jobs SET status = '{last_status}', dispatched_at = IF('{last_status}' = \
                 'dispatched', schedule_time, NULL) WHERE id = ?"
            ),
            last,
        )
        .await;
        sqlx::query(
            "UPDATE schedules SET cursor_at = ?, last_at = ?, occurrences = 1 WHERE id = ?",
        )
        .bind(phase.naive_utc())
        .bind(phase.naive_utc())
        .bind(row.id)
        .execute(&db.sql)
        .await
        .unwrap();
        let done = db
            .store
            .schedule_materialize(row.id, Duration::ZERO)
            .await
            .unwrap();
        made.push((key, done, row.id));
    }
    let latest_missed = phase + Span::minutes(10);
    let next = phase + Span::minutes(11);

    let (_, ran, ran_id) = &made[0];
    let keys: Vec<Option<String>> = ran.created.iter().map(|j| j.key.clone()).collect();
    assert_eq!(
        keys,
        [
            Some(occurrence_key("ran", latest_missed)),
            Some(occurrence_key("ran", next))
        ],
        "one firing for the ten missed, and the next on time"
    );
    assert!(
        ran.created[0].schedule_time >= now,
        "the firing runs now, not at its missed time"
    );
    assert_eq!(ran.created[1].schedule_time, next);
    assert_eq!(ran.skipped, 9);
    let row = db.store.schedule_get(*ran_id).await.unwrap();
    assert_eq!(
        (row.occurrences, row.last_at, row.cursor_at),
        (3, Some(next), next)
    );

    let (_, waiting, _) = &made[1];
    let keys: Vec<Option<String>> = waiting.created.iter().map(|j| j.key.clone()).collect();
    assert_eq!(keys, [Some(occurrence_key("waiting", next))]);
    assert_eq!(waiting.skipped, 10);
    db.finish().await;
}

// ---------------------------------------------------------------------------
// update

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_answers_a_version_mismatch_without_changing_anything() {
    let db = Db::new().await;
    let (row, occurrence) = hourly_with_one_occurrence(&db, "hourly").await;
    let before = db.store.job_get(occurrence).await.unwrap();
    let changed = ScheduleDef {
        payload: b"\"new\"".to_vec(),
        ..row.def.clone()
    };
    match db.store.schedule_update(row.id, 7, &changed).await.unwrap() {
        ScheduleUpdate::VersionMismatch(current) => {
            assert_eq!((current.version, current.def), (1, row.def.clone()))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(db.store.schedule_get(row.id).await.unwrap().def, row.def);
    assert_eq!(db.store.job_get(occurrence).await.unwrap(), before);
    assert!(matches!(
        db.store.schedule_update(404_404, 1, &changed).await,
        Err(StoreError::NotFound(404_404))
    ));
    db.finish().await;
}

/// A change that keeps the times updates pending occurrences in place; one
/// that moves them deletes those not yet due (to be created again from
/// now) and leaves those due or produced alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_changes_pending_occurrences_in_place_or_replaces_those_not_yet_due() {
    let db = Db::new().await;
    let (row, future) = hourly_with_one_occurrence(&db, "hourly").await;
    // An occurrence that is due now, and one produced.
    let due = occurrence(&db, row.id, "hourly@due", -1_000).await;
    let produced = occurrence(&db, row.id, "hourly@produced", -1_000).await;
    db.dispatch(&[produced], 1).await;
    let produced_before = db.store.job_get(produced).await.unwrap();

    let in_place = ScheduleDef {
        payload: b"\"v2\"".to_vec(),
        policy: Policy {
            max_attempts: 7,
            ..row.def.policy
        },
        ..row.def.clone()
    };
    let ScheduleUpdate::Applied {
        schedule,
        replaced,
        updated,
    } = db
        .store
        .schedule_update(row.id, 1, &in_place)
        .await
        .unwrap()
    else {
        panic!("the version was current");
    };
    assert_eq!(
        (replaced, updated),
        (0, 2),
        "both pending occurrences follow"
    );
    assert_eq!((schedule.version, &schedule.def), (2, &in_place));
    assert_eq!(
        (schedule.cursor_at, schedule.last_at),
        (row.cursor_at, row.last_at)
    );
    for id in [future, due] {
        let job = db.store.job_get(id).await.unwrap();
        assert_eq!(
            (job.payload.as_slice(), job.policy.max_attempts, job.version),
            (&b"\"v2\""[..], 7, 2)
        );
    }
    assert_eq!(db.store.job_get(produced).await.unwrap(), produced_before);

    let retimed = ScheduleDef {
        every_ms: Some(2 * HOUR_MS),
        ..in_place.clone()
    };
    let now = db.store.db_now().await.unwrap();
    let ScheduleUpdate::Applied {
        schedule,
        replaced,
        updated,
    } = db.store.schedule_update(row.id, 2, &retimed).await.unwrap()
    else {
        panic!("the version was current");
    };
    assert_eq!((replaced, updated), (1, 1));
    assert!(matches!(
        db.store.job_get(future).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(db.store.job_get(due).await.unwrap().status, Status::Pending);
    assert_eq!(db.store.job_get(produced).await.unwrap(), produced_before);
    let start = row.def.start_at;
    assert_eq!(
        (schedule.version, schedule.status, schedule.occurrences),
        (3, ScheduleStatus::Active, 0)
    );
    assert_eq!(
        (schedule.cursor_at, schedule.next_at, schedule.last_at),
        (start - Span::milliseconds(1), Some(start), None),
        "from the new start (still ahead), nothing created yet"
    );
    assert!(schedule.updated_at >= now);
    let again = db
        .store
        .schedule_materialize(row.id, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        again
            .created
            .iter()
            .map(|j| j.schedule_time)
            .collect::<Vec<_>>(),
        [start],
        "the deleted occurrence's key is free again"
    );
    db.finish().await;
}

/// Turning misfire to skip arms the expiry of pending occurrences still at
/// their own instant, not of one someone moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_to_skip_arms_the_expiry_only_of_occurrences_at_their_own_time() {
    let db = Db::new().await;
    let start = db.store.db_now().await.unwrap() + Span::minutes(10);
    let row = insert(&db, "ticks", "hourly", every(HOUR_MS, start)).await;
    let done = db
        .store
        .schedule_materialize(row.id, Duration::from_secs(3_600))
        .await
        .unwrap();
    assert_eq!(done.created.len(), 2);
    let (kept, moved) = (done.created[0].id, done.created[1].id);
    db.edit(
        "UPDATE jobs SET schedule_time = schedule_time + INTERVAL 5 MINUTE WHERE id = ?",
        moved,
    )
    .await;
    let skip = ScheduleDef {
        misfire: Misfire::Skip,
        misfire_grace_ms: 30_000,
        ..row.def.clone()
    };
    assert!(matches!(
        db.store.schedule_update(row.id, 1, &skip).await.unwrap(),
        ScheduleUpdate::Applied { updated: 2, .. }
    ));
    assert_eq!(
        db.store.job_get(kept).await.unwrap().expires_at,
        Some(start + Span::seconds(30))
    );
    assert_eq!(db.store.job_get(moved).await.unwrap().expires_at, None);
    db.finish().await;
}

// ---------------------------------------------------------------------------
// pause, delete

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_deletes_occurrences_not_yet_due_and_resume_starts_from_now() {
    let db = Db::new().await;
    let (row, future) = hourly_with_one_occurrence(&db, "hourly").await;
    let due = occurrence(&db, row.id, "hourly@due", -1_000).await;

    let before = db.store.db_now().await.unwrap();
    let (paused, deleted) = db.store.schedule_pause(row.id, true).await.unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(
        (
            paused.status,
            paused.version,
            paused.last_at,
            paused.occurrences
        ),
        (ScheduleStatus::Paused, 2, None, 0)
    );
    assert!(paused.cursor_at >= before);
    assert!(matches!(
        db.store.job_get(future).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        pending_ids(&db, row.id).await,
        [due],
        "a due occurrence stays"
    );

    let (again, deleted) = db.store.schedule_pause(row.id, true).await.unwrap();
    assert_eq!(
        (again.status, again.version, deleted),
        (ScheduleStatus::Paused, 2, 0)
    );
    assert!(db
        .store
        .schedule_materialize(row.id, Duration::ZERO)
        .await
        .unwrap()
        .created
        .is_empty());

    let before = db.store.db_now().await.unwrap();
    let (resumed, deleted) = db.store.schedule_pause(row.id, false).await.unwrap();
    assert_eq!(
        (resumed.status, resumed.version, resumed.last_at, deleted),
        (ScheduleStatus::Active, 3, None, 0)
    );
    assert!(
        resumed.cursor_at >= before,
        "the pause's occurrences are not misfires"
    );
    assert_eq!(resumed.next_at, Some(row.def.start_at));
    let (same, _) = db.store.schedule_pause(row.id, false).await.unwrap();
    assert_eq!(
        same.version, 3,
        "resuming an active schedule changes nothing"
    );

    let ended = db
        .store
        .schedule_insert(&schedule_new("ticks", "ended", row.def.clone()), None)
        .await
        .unwrap();
    for pause in [true, false] {
        let (still, _) = db.store.schedule_pause(ended.id, pause).await.unwrap();
        assert_eq!((still.status, still.version), (ScheduleStatus::Ended, 1));
    }
    assert!(matches!(
        db.store.schedule_pause(404_404, true).await,
        Err(StoreError::NotFound(404_404))
    ));
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_cancels_or_keeps_the_pending_occurrences_and_leaves_the_produced() {
    let db = Db::new().await;
    let api = db.store_as(Actor::Api).with_actor("api:ops");
    let mut made = Vec::new();
    for key in ["cancelling", "keeping"] {
        let (row, future) = hourly_with_one_occurrence(&db, key).await;
        let due = occurrence(&db, row.id, &format!("{key}@due"), -1_000).await;
        let produced = occurrence(&db, row.id, &format!("{key}@produced"), -1_000).await;
        db.dispatch(&[produced], 1).await;
        made.push((row.id, future, due, produced));
    }

    let (id, future, due, produced) = made[0];
    assert_eq!(
        api.schedule_delete(id, PendingOccurrences::Cancel)
            .await
            .unwrap(),
        2
    );
    assert!(matches!(
        db.store.schedule_get(id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        db.store.job_get(future).await,
        Err(StoreError::NotFound(_))
    ));
    let job = db.store.job_get(due).await.unwrap();
    assert_eq!(
        (job.status, job.last_error.as_deref()),
        (
            Status::Cancelled,
            Some("cancelled: its schedule was deleted")
        )
    );
    let last = db.store.job_history(due).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.actor.as_str(), last.status),
        ("api:ops", Status::Cancelled)
    );
    assert_eq!(
        db.store.job_get(produced).await.unwrap().status,
        Status::Dispatched
    );

    let (id, future, due, produced) = made[1];
    assert_eq!(
        api.schedule_delete(id, PendingOccurrences::Keep)
            .await
            .unwrap(),
        0
    );
    assert!(matches!(
        db.store.schedule_get(id).await,
        Err(StoreError::NotFound(_))
    ));
    for id in [future, due] {
        assert_eq!(db.store.job_get(id).await.unwrap().status, Status::Pending);
    }
    assert_eq!(
        db.store.job_get(produced).await.unwrap().status,
        Status::Dispatched
    );

    assert!(matches!(
        api.schedule_delete(404_404, PendingOccurrences::Cancel)
            .await,
        Err(StoreError::NotFound(404_404))
    ));
    api.close().await;
    db.finish().await;
}

// ---------------------------------------------------------------------------
// stats, behind, pending

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_schedules_by_status_and_name_those_behind() {
    let db = Db::new().await;
    let empty = db
        .store
        .schedule_stats(Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        (
            empty.active,
            empty.paused,
            empty.ended,
            empty.behind,
            empty.topics_paused
        ),
        (0, 0, 0, 0, 0)
    );
    let start = db.store.db_now().await.unwrap() + Span::minutes(10);
    insert(&db, "ticks", "on-time", every(HOUR_MS, start)).await;
    let late = insert(&db, "ticks", "late", every(HOUR_MS, start)).await.id;
    db.edit(
        "UPDATE schedules SET next_at = UTC_TIMESTAMP(3) - INTERVAL 2 MINUTE WHERE id = ?",
        late,
    )
    .await;
    let later = insert(&db, "ticks", "later", every(HOUR_MS, start))
        .await
        .id;
    db.edit(
        "UPDATE schedules SET next_at = UTC_TIMESTAMP(3) - INTERVAL 30 SECOND WHERE id = ?",
        later,
    )
    .await;
    let paused = insert(&db, "ticks", "paused", every(HOUR_MS, start))
        .await
        .id;
    db.store.schedule_pause(paused, true).await.unwrap();
    db.edit(
        "UPDATE schedules SET next_at = UTC_TIMESTAMP(3) - INTERVAL 1 HOUR WHERE id = ?",
        paused,
    )
    .await;
    db.store
        .schedule_insert(&schedule_new("ticks", "ended", every(HOUR_MS, start)), None)
        .await
        .unwrap();
    db.store
        .topic_control_set(
            "ticks",
            &TopicChange {
                paused: Some(true),
                ..TopicChange::default()
            },
            "api:ops",
        )
        .await
        .unwrap();

    let stats = db
        .store
        .schedule_stats(Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        (
            stats.active,
            stats.paused,
            stats.ended,
            stats.behind,
            stats.topics_paused
        ),
        (3, 1, 1, 1, 1)
    );
    let behind = db
        .store
        .schedules_behind(Duration::from_secs(60), 10)
        .await
        .unwrap();
    assert_eq!(behind.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [late]);
    let behind = db
        .store
        .schedules_behind(Duration::from_secs(10), 10)
        .await
        .unwrap();
    assert_eq!(
        behind.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [late, later],
        "the longest behind first"
    );
    assert!(behind[0].1 < behind[1].1);
    assert!(db
        .store
        .schedules_behind(Duration::from_secs(10), 0)
        .await
        .unwrap()
        .is_empty());
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_lists_a_schedules_waiting_occurrences_soonest_first() {
    let db = Db::new().await;
    let start = db.store.db_now().await.unwrap() + Span::minutes(10);
    let row = insert(&db, "ticks", "hourly", every(HOUR_MS, start)).await;
    let other = insert(&db, "ticks", "other", every(HOUR_MS, start)).await;
    let created = db
        .store
        .schedule_materialize(row.id, Duration::from_secs(2 * 3_600))
        .await
        .unwrap()
        .created;
    db.store
        .schedule_materialize(other.id, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(created.len(), 3);
    db.store.job_cancel(created[1].id).await.unwrap();

    let pending = db.store.schedule_pending(row.id, 100).await.unwrap();
    assert_eq!(
        pending.iter().map(|j| j.id).collect::<Vec<_>>(),
        [created[0].id, created[2].id]
    );
    assert!(
        pending.iter().all(|j| j.payload.is_empty()),
        "without payloads"
    );
    assert_eq!(db.store.schedule_pending(row.id, 1).await.unwrap().len(), 1);
    assert!(db
        .store
        .schedule_pending(404_404, 100)
        .await
        .unwrap()
        .is_empty());
    db.finish().await;
}

/// A schedule's jitter and window place each occurrence from its key: the
/// same occurrence, the same instant; its job's window starts at the
/// jittered time and the instant lies in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jitter_and_window_place_each_occurrence_from_its_key() {
    let def = ScheduleDef {
        window_ms: Some(60_000),
        jitter_ms: Some(30_000),
        ..every(HOUR_MS, Utc::now())
    };
    let at = Utc::now() + chrono::Duration::hours(1);
    let placed = tickler::store::occurrence_placed("t", "renewal@x", at, &def);
    assert_eq!(
        placed,
        tickler::store::occurrence_placed("t", "renewal@x", at, &def)
    );
    let window = placed.window.expect("a window");
    let tickler::domain::job::Schedule::At(start) = window.start else {
        panic!("absolute")
    };
    assert!(
        start >= at && start <= at + chrono::Duration::seconds(30),
        "jittered: {start}"
    );
    assert!(placed.at >= start && placed.at <= start + chrono::Duration::seconds(60));
    let plain =
        tickler::store::occurrence_placed("t", "renewal@x", at, &every(HOUR_MS, Utc::now()));
    assert_eq!((plain.at, plain.window), (at, None));
}

// ---------------------------------------------------------------------------
// gaps (schedule_gaps), and the audit that reads them

/// What `schedule_fires` says of schedule `id`'s occurrences in [from, to).
async fn audited(
    db: &Db,
    id: u64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, FireOutcome)> {
    let row = db.store.schedule_get(id).await.unwrap();
    let timing = row.def.timing().unwrap();
    let expected = fires::expected(&timing, &row.fires_span(from, to), fires::FIRES_MAX).unwrap();
    db.store
        .schedule_fires(&row, &expected)
        .await
        .unwrap()
        .fires
        .iter()
        .map(|fire| (fire.expected_at, fire.outcome))
        .collect()
}

type GapRow = (String, DateTime<Utc>, Option<DateTime<Utc>>);

async fn gaps(db: &Db, id: u64) -> Vec<GapRow> {
    let rows: Vec<(String, chrono::NaiveDateTime, Option<chrono::NaiveDateTime>)> = sqlx::query_as(
        "SELECT CAST(reason AS CHAR), from_at, to_at FROM schedule_gaps \
             WHERE schedule_id = ? ORDER BY from_at",
    )
    .bind(id)
    .fetch_all(&db.sql)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(reason, from, to)| (reason, from.and_utc(), to.map(|t| t.and_utc())))
        .collect()
}

/// As if schedule `id` had been made at `at` (its first occurrences are
/// then expected by an audit).
async fn made_at(db: &Db, id: u64, at: DateTime<Utc>) {
    sqlx::query("UPDATE schedules SET created_at = ? WHERE id = ?")
        .bind(at.naive_utc())
        .bind(id)
        .execute(&db.sql)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skips_are_one_gap_a_run_extended_across_passes_and_audited_as_skipped() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let phase = DateTime::from_timestamp(now.timestamp() - 630, 0).unwrap();
    let minute = |k: i64| phase + Span::minutes(k);
    let def = ScheduleDef {
        misfire: Misfire::Skip,
        misfire_grace_ms: 1_000,
        ..every(60_000, phase)
    };
    let row = insert(&db, "ticks", "skips", def).await;
    made_at(&db, row.id, phase - Span::minutes(1)).await;
    // A pass two minutes in skipped phase..+2; an older run stands apart.
    sqlx::query("UPDATE schedules SET cursor_at = ? WHERE id = ?")
        .bind(minute(2).naive_utc())
        .bind(row.id)
        .execute(&db.sql)
        .await
        .unwrap();
    for (from, to) in [(minute(-20), minute(-15)), (minute(0), minute(2))] {
        sqlx::query(
            "INSERT INTO schedule_gaps (schedule_id, reason, from_at, to_at) \
             VALUES (?, 'skipped', ?, ?)",
        )
        .bind(row.id)
        .bind(from.naive_utc())
        .bind(to.naive_utc())
        .execute(&db.sql)
        .await
        .unwrap();
    }
    let done = db
        .store
        .schedule_materialize(row.id, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!((done.skipped, done.created.len()), (8, 1), "+3..+10 missed");
    assert_eq!(
        gaps(&db, row.id).await,
        [
            ("skipped".to_owned(), minute(-20), Some(minute(-15))),
            ("skipped".to_owned(), minute(0), Some(minute(10)))
        ],
        "the run goes on in its row"
    );
    let mut expected: Vec<_> = (0..=10)
        .map(|k| (minute(k), FireOutcome::Skipped))
        .collect();
    expected.push((minute(11), FireOutcome::Upcoming));
    assert_eq!(audited(&db, row.id, minute(0), minute(12)).await, expected);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_is_a_gap_from_the_first_occurrence_it_removes_to_the_resume() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let phase = DateTime::from_timestamp(now.timestamp() - 90, 0).unwrap();
    let minute = |k: i64| phase + Span::minutes(k);
    let row = insert(&db, "ticks", "held", every(60_000, phase)).await;
    made_at(&db, row.id, phase - Span::minutes(1)).await;
    // +1 passed half a minute ago, but its job was moved five minutes on
    // (as jitter or a window would): the pause removes it too.
    let moved = occurrence(&db, row.id, &occurrence_key("held", minute(1)), 300_000).await;
    db.store
        .schedule_materialize(row.id, Duration::ZERO)
        .await
        .unwrap();
    let (_, deleted) = db.store.schedule_pause(row.id, true).await.unwrap();
    assert_eq!(deleted, 2, "+1 (moved) and +2");
    assert!(matches!(
        db.store.job_get(moved).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        gaps(&db, row.id).await,
        [("paused".to_owned(), minute(1), None)]
    );
    assert_eq!(
        audited(&db, row.id, minute(0), minute(4)).await,
        [
            (minute(0), FireOutcome::Missing),
            (minute(1), FireOutcome::Paused),
            (minute(2), FireOutcome::Paused),
            (minute(3), FireOutcome::Paused)
        ],
        "a pause that lasts covers what comes"
    );

    let (resumed, _) = db.store.schedule_pause(row.id, false).await.unwrap();
    let gaps = gaps(&db, row.id).await;
    assert_eq!(gaps.len(), 1);
    assert_eq!(gaps[0].2, Some(resumed.cursor_at), "closed at the resume");
    assert_eq!(
        audited(&db, row.id, minute(0), minute(4)).await,
        [
            (minute(0), FireOutcome::Missing),
            (minute(1), FireOutcome::Paused),
            (minute(2), FireOutcome::Upcoming),
            (minute(3), FireOutcome::Upcoming)
        ],
        "after the resume, what comes is to come"
    );
    db.store
        .schedule_delete(row.id, PendingOccurrences::Cancel)
        .await
        .unwrap();
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM schedule_gaps")
        .fetch_one(&db.sql)
        .await
        .unwrap();
    assert_eq!(left, 0, "deleted with the schedule");
    db.finish().await;
}
