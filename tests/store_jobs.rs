//! The store's methods on `jobs` for the API (src/store/jobs.rs), topic
//! controls (topics.rs) and the counts (stats.rs), method by method,
//! against a real database (no Redis, no broker): what each answers for
//! every state a row can be in, what it leaves in the row and in
//! `job_events`, and what it leaves alone. The dispatch path's methods are
//! tested in store_dispatch.rs.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Duration as Span, NaiveDate, Utc};
use tickler::domain::job::{Expiry, Job, JobId, NewJob, PayloadKind, Schedule, Status};
use tickler::domain::policy::Policy;
use tickler::domain::zones::WallClock;
use tickler::roles::reporter::truth::Counts;
use tickler::store::{
    Actor, BatchRow, Cancelled, Dispatched, JobChanges, JobFilter, Modified, StoreError,
    TopicChange, TopicControl, TopicCount, WindowEntry,
};
use tickler_testkit::store::{job_new, Db, LEASE};

fn ids(jobs: &[Job]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

fn entry_ids(entries: &[WindowEntry]) -> Vec<JobId> {
    entries.iter().map(|e| e.id).collect()
}

fn created(row: &BatchRow) -> &Job {
    match row {
        BatchRow::Created(job) => job,
        BatchRow::Duplicate => panic!("a duplicate where a job was expected"),
    }
}

/// A job on `topic` due at `at` exactly (millisecond precision, as stored).
async fn job_at(db: &Db, topic: &str, at: DateTime<Utc>) -> JobId {
    let job = NewJob {
        schedule: Schedule::At(at),
        ..job_new(topic, 0)
    };
    db.store.job_insert(&job).await.unwrap().0.id
}

// ---------------------------------------------------------------------------
// insert, insert_many, get, find_by_key

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_stores_what_it_is_given_and_records_its_creation() {
    let db = Db::new().await;
    let api = db.store_as(Actor::Api).with_actor("api:alice");
    let before = db.store.db_now().await.unwrap();
    let at = before + Span::minutes(5);
    let policy = Policy {
        expects_result: true,
        max_attempts: 3,
        backoff_base_ms: 200,
        backoff_cap_ms: 9_000,
        ack_timeout_ms: 5_000,
    };
    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let new = NewJob {
        key: Some("order-1".to_owned()),
        payload: vec![0, 159, 146, 150],
        payload_kind: PayloadKind::Bytes,
        headers: BTreeMap::from([("source".to_owned(), "test".to_owned())]),
        schedule: Schedule::At(at),
        policy,
        trace_parent: Some(trace.to_owned()),
        ..job_new("orders", 0)
    };
    let (job, db_now) = api.job_insert(&new).await.unwrap();
    assert_eq!(job.topic, "orders");
    assert_eq!(job.key.as_deref(), Some("order-1"));
    assert_eq!(job.payload, [0, 159, 146, 150]);
    assert_eq!(job.payload_kind, PayloadKind::Bytes);
    assert_eq!(job.headers, new.headers);
    assert_eq!(job.schedule_time, at);
    assert_eq!(job.policy, policy);
    assert_eq!(job.trace_parent.as_deref(), Some(trace));
    assert_eq!(
        (job.status, job.attempt, job.version),
        (Status::Pending, 1, 1)
    );
    assert_eq!(
        (
            job.dispatched_at,
            job.kafka_partition,
            job.kafka_offset,
            job.ack_deadline
        ),
        (None, None, None, None)
    );
    assert_eq!(job.last_error, None);
    assert_eq!(
        job.created_at, job.updated_at,
        "a fresh row is not an edited one"
    );
    assert!(db_now >= before && db_now >= job.created_at);
    assert_eq!(db.store.job_get(job.id).await.unwrap(), job);

    let history = db.store.job_history(job.id).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        (
            history[0].actor.as_str(),
            history[0].status,
            history[0].schedule_time,
            history[0].attempt
        ),
        ("api:alice", Status::Pending, at, 1)
    );
    api.close().await;
    db.finish().await;
}

/// A delay counts from the database's clock at the insert, never from the
/// caller's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_with_a_delay_counts_it_from_the_database_clock() {
    let db = Db::new().await;
    let before = db.store.db_now().await.unwrap();
    let new = NewJob {
        schedule: Schedule::After { delay_ms: 90_000 },
        ..job_new("store-test", 0)
    };
    let (job, db_now) = db.store.job_insert(&new).await.unwrap();
    assert!(job.schedule_time >= before + Span::seconds(90));
    assert!(job.schedule_time <= db_now + Span::seconds(90));
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_refuses_a_taken_key_and_keys_compare_byte_for_byte() {
    let db = Db::new().await;
    let keyed = |topic: &str, key: &str| NewJob {
        key: Some(key.to_owned()),
        ..job_new(topic, 60_000)
    };
    let first = db.store.job_insert(&keyed("t", "k")).await.unwrap().0;
    assert!(matches!(
        db.store.job_insert(&keyed("t", "k")).await,
        Err(StoreError::DuplicateKey)
    ));
    // Neither a trailing space, nor case, nor another topic is the same key.
    let spaced = db.store.job_insert(&keyed("t", "k ")).await.unwrap().0;
    let upper = db.store.job_insert(&keyed("t", "K")).await.unwrap().0;
    let elsewhere = db.store.job_insert(&keyed("t2", "k")).await.unwrap().0;
    // Jobs without a key never collide.
    db.store.job_insert(&job_new("t", 1)).await.unwrap();
    db.store.job_insert(&job_new("t", 1)).await.unwrap();

    let (jobs, events): (i64, i64) =
        sqlx::query_as("SELECT (SELECT COUNT(*) FROM jobs), (SELECT COUNT(*) FROM job_events)")
            .fetch_one(&db.sql)
            .await
            .unwrap();
    assert_eq!(
        (jobs, events),
        (6, 6),
        "the refused insert wrote neither a row nor history"
    );

    let found = |topic: &'static str, key: &'static str| {
        let store = db.store.clone();
        async move { store.job_find_by_key(topic, key).await.unwrap() }
    };
    assert_eq!(found("t", "k").await, Some(first));
    assert_eq!(found("t", "k ").await.map(|j| j.id), Some(spaced.id));
    assert_eq!(found("t", "K").await.map(|j| j.id), Some(upper.id));
    assert_eq!(found("t2", "k").await.map(|j| j.id), Some(elsewhere.id));
    assert_eq!(found("t", "missing").await, None);
    assert_eq!(found("t3", "k").await, None);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_many_past_the_servers_placeholder_limit_is_written_in_statements_that_fit() {
    // 5,000 rows of 15 placeholders each would be one statement of 75,000:
    // over the 65,535 a prepared statement may hold (ERROR 1390).
    let db = Db::new().await;
    let items: Vec<NewJob> = (0..5_000)
        .map(|i| NewJob {
            key: Some(format!("k{i}")),
            ..job_new("t", 60_000)
        })
        .collect();
    let (rows, _) = db.store.job_insert_many(&items).await.unwrap();
    assert_eq!(rows.len(), 5_000);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(created(row).key.as_deref(), Some(format!("k{i}").as_str()));
    }
    let (events, jobs): (i64, i64) =
        sqlx::query_as("SELECT (SELECT COUNT(*) FROM job_events), (SELECT COUNT(*) FROM jobs)")
            .fetch_one(&db.sql)
            .await
            .unwrap();
    assert_eq!((events, jobs), (5_000, 5_000));
    // With ingress positions too, and a key already taken in a later chunk.
    let positions: Vec<String> = (0..4_001).map(|i| format!("0/{i}/requests")).collect();
    let mut more: Vec<NewJob> = (0..4_001)
        .map(|i| NewJob {
            key: Some(format!("m{i}")),
            ..job_new("t", 60_000)
        })
        .collect();
    more[4_000].key = Some("k7".to_owned());
    let more: Vec<&NewJob> = more.iter().collect();
    let (rows, _) = db
        .store
        .job_insert_many_with_positions(&more, &positions)
        .await
        .unwrap();
    assert!(matches!(rows[4_000], BatchRow::Duplicate));
    let (_, position) = db
        .store
        .job_find_by_key_with_position("t", "m3999")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(position.as_deref(), Some("0/3999/requests"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_many_answers_one_row_per_item_in_order_and_takes_a_key_once() {
    let db = Db::new().await;
    let api = db.store_as(Actor::Api).with_actor("api:batch");
    let old = db
        .store
        .job_insert(&NewJob {
            key: Some("old".to_owned()),
            payload: b"\"before\"".to_vec(),
            ..job_new("t", 60_000)
        })
        .await
        .unwrap()
        .0;
    let now = db.store.db_now().await.unwrap();
    // Below the millisecond: stored, and answered, to the millisecond.
    let expires = now + Span::minutes(10) + Span::microseconds(123);
    let keyed = |key: Option<&str>| NewJob {
        key: key.map(str::to_owned),
        payload: b"\"batch\"".to_vec(),
        ..job_new("t", 60_000)
    };
    let items = [
        keyed(Some("a")),
        keyed(None),
        keyed(Some("a")),
        keyed(Some("old")),
        // Every field a request sets, so that the jobs answered (built from
        // the items and what the database decided) are compared with what
        // it stored, field by field.
        NewJob {
            schedule: Schedule::After { delay_ms: 120_000 },
            schedule_id: Some(77),
            expires_at: Some(expires),
            payload: vec![0, 159, 146, 150],
            payload_kind: PayloadKind::Bytes,
            headers: BTreeMap::from([
                ("source".to_owned(), "batch \u{1} \"é\"".to_owned()),
                ("x-empty".to_owned(), String::new()),
            ]),
            policy: Policy {
                expects_result: true,
                max_attempts: 3,
                backoff_base_ms: 200,
                backoff_cap_ms: 9_000,
                ack_timeout_ms: 5_000,
            },
            trace_parent: Some(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
            ),
            ..keyed(Some("b"))
        },
    ];
    let (rows, db_now) = api.job_insert_many(&items).await.unwrap();
    assert_eq!(rows.len(), 5, "one row per item");
    assert!(
        matches!(rows[2], BatchRow::Duplicate),
        "taken earlier in the batch"
    );
    assert!(
        matches!(rows[3], BatchRow::Duplicate),
        "taken by an earlier row"
    );
    let (a, none, b) = (created(&rows[0]), created(&rows[1]), created(&rows[4]));
    assert_eq!(a.key.as_deref(), Some("a"));
    assert_eq!(none.key, None);
    assert_eq!(b.key.as_deref(), Some("b"));
    assert!(a.id < none.id && none.id < b.id, "ids in item order");
    assert_eq!(
        (b.schedule_id, b.expires_at),
        (
            Some(77),
            Some(tickler::domain::job::truncate_to_ms(expires))
        )
    );
    assert_eq!((a.schedule_id, a.expires_at), (None, None));
    assert!(b.schedule_time >= now + Span::seconds(120));
    assert!(b.schedule_time <= db_now + Span::seconds(120));
    for job in [a, none, b] {
        assert_eq!(db.store.job_get(job.id).await.unwrap(), *job);
        let history = db.store.job_history(job.id).await.unwrap();
        assert_eq!(history.len(), 1);
        assert_eq!(
            (history[0].actor.as_str(), history[0].status),
            ("api:batch", Status::Pending)
        );
    }
    assert_eq!(
        db.store.job_get(old.id).await.unwrap(),
        old,
        "the row holding the key is left as it was"
    );
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
        .fetch_one(&db.sql)
        .await
        .unwrap();
    assert_eq!(count, 4, "nothing written for the duplicates");
    api.close().await;
    db.finish().await;
}

/// `NewJob` carries the schedule it is an occurrence of and when it
/// expires; a single insert should keep them as a batch insert does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_keeps_the_schedule_and_the_expiry_it_is_given() {
    let db = Db::new().await;
    let expires = db.store.db_now().await.unwrap() + Span::minutes(10);
    let (job, _) = db
        .store
        .job_insert(&NewJob {
            schedule_id: Some(77),
            // Below the millisecond: stored, and answered, to the ms.
            expires_at: Some(expires + Span::microseconds(999)),
            schedule: Schedule::After { delay_ms: 60_000 },
            ..job_new("t", 60_000)
        })
        .await
        .unwrap();
    assert_eq!((job.schedule_id, job.expires_at), (Some(77), Some(expires)));
    assert_eq!(db.store.job_get(job.id).await.unwrap(), job);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_job_is_not_found_by_any_method_that_names_it() {
    let db = Db::new().await;
    let missing = 404_404;
    assert!(matches!(
        db.store.job_get(missing).await,
        Err(StoreError::NotFound(404_404))
    ));
    assert!(matches!(
        db.store.job_history(missing).await,
        Err(StoreError::NotFound(404_404))
    ));
    assert!(matches!(
        db.store.job_cancel(missing).await,
        Err(StoreError::NotFound(404_404))
    ));
    assert!(matches!(
        db.store
            .job_modify(missing, 1, &JobChanges::default())
            .await,
        Err(StoreError::NotFound(404_404))
    ));
    db.finish().await;
}

// ---------------------------------------------------------------------------
// list, history

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_by_id_without_payloads_and_applies_each_filter() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let hour = |n: i64| now + Span::hours(n);
    let insert = |topic: &'static str, key: Option<&'static str>, at| {
        let store = db.store.clone();
        async move {
            let job = NewJob {
                key: key.map(str::to_owned),
                payload: b"\"large\"".to_vec(),
                schedule: Schedule::At(at),
                ..job_new(topic, 0)
            };
            store.job_insert(&job).await.unwrap().0.id
        }
    };
    let a = insert("orders.eu", Some("k1"), hour(1)).await;
    let b = insert("orders.us", Some("k2"), hour(2)).await;
    let c = insert("orders_x", None, hour(3)).await;
    let d = insert("orders.eu", None, hour(4)).await;
    db.store.job_cancel(d).await.unwrap();

    let list = |filter: JobFilter, after: Option<JobId>, limit: u32| {
        let store = db.store.clone();
        async move { ids(&store.job_list(&filter, after, limit).await.unwrap()) }
    };
    let all = db
        .store
        .job_list(&JobFilter::default(), None, 100)
        .await
        .unwrap();
    // Ids are a total order, not a time order (see docs/architecture.md).
    let by_id = sorted([a, b, c, d]);
    assert_eq!(ids(&all), by_id);
    assert!(
        all.iter().all(|j| j.payload.is_empty()),
        "listings leave payloads out"
    );
    assert_eq!(list(JobFilter::default(), None, 2).await, by_id[..2]);
    assert_eq!(
        list(JobFilter::default(), Some(by_id[1]), 2).await,
        by_id[2..]
    );
    assert!(list(JobFilter::default(), Some(by_id[3]), 2)
        .await
        .is_empty());

    let filter = |topic: Option<&str>, status, key: Option<&str>| JobFilter {
        topic: topic.map(str::to_owned),
        status,
        key: key.map(str::to_owned),
        ..JobFilter::default()
    };
    assert_eq!(
        list(filter(Some("orders.eu"), None, None), None, 100).await,
        sorted([a, d])
    );
    assert_eq!(
        list(filter(None, Some(Status::Cancelled), None), None, 100).await,
        [d]
    );
    assert_eq!(list(filter(None, None, Some("k2")), None, 100).await, [b]);
    assert_eq!(
        list(
            filter(Some("orders.eu"), Some(Status::Pending), None),
            None,
            100
        )
        .await,
        [a],
        "filters narrow together"
    );
    let from = JobFilter {
        run_at_from: Some(hour(2)),
        ..JobFilter::default()
    };
    assert_eq!(
        list(from, None, 100).await,
        sorted([b, c, d]),
        "from is inclusive"
    );
    let to = JobFilter {
        run_at_to: Some(hour(3)),
        ..JobFilter::default()
    };
    assert_eq!(list(to, None, 100).await, sorted([a, b]), "to is exclusive");
    let patterns = |p: &[&str]| JobFilter {
        topic_patterns: Some(p.iter().map(|s| s.to_string()).collect()),
        ..JobFilter::default()
    };
    assert_eq!(
        list(patterns(&["orders_*"]), None, 100).await,
        [c],
        "'_' in a pattern is itself"
    );
    assert_eq!(
        list(patterns(&["orders.*"]), None, 100).await,
        sorted([a, b, d])
    );
    assert_eq!(
        list(patterns(&["orders.us", "orders_x"]), None, 100).await,
        sorted([b, c])
    );
    assert!(
        list(patterns(&[]), None, 100).await.is_empty(),
        "no pattern, no topic"
    );
    db.finish().await;
}

/// Each change of status, time or attempt is one event, oldest first, with
/// who made it; a payload-only change and the claim itself are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_records_each_change_of_state_time_or_attempt_with_who_made_it() {
    let db = Db::new().await;
    let alice = db.store_as(Actor::Api).with_actor("api:alice");
    let bob = alice.with_actor("api:bob");
    let now = db.store.db_now().await.unwrap();
    let (job, _) = alice
        .job_insert(&NewJob {
            schedule: Schedule::At(now + Span::hours(1)),
            ..job_new("store-test", 0)
        })
        .await
        .unwrap();
    let payload_only = JobChanges {
        payload: Some((b"\"new\"".to_vec(), PayloadKind::Json)),
        ..JobChanges::default()
    };
    assert!(matches!(
        bob.job_modify(job.id, 1, &payload_only).await.unwrap(),
        Modified::Applied(..)
    ));
    let due = now - Span::seconds(1);
    let moved = JobChanges {
        schedule: Some(Schedule::At(due)),
        ..JobChanges::default()
    };
    assert!(matches!(
        bob.job_modify(job.id, 2, &moved).await.unwrap(),
        Modified::Applied(..)
    ));
    db.dispatch(&[job.id], 3).await;
    db.edit(
        "UPDATE jobs SET status = 'dead', last_error = 'by hand' WHERE id = ?",
        job.id,
    )
    .await;
    // Observed, as the reconciler's pass would (tests/hand_edits.rs).
    assert_eq!(
        db.store
            .hand_edits_observe(
                now - Span::minutes(1),
                now + Span::hours(2),
                &mut tickler::store::HandEditsChecked::default()
            )
            .await
            .unwrap(),
        1
    );

    let history = db.store.job_history(job.id).await.unwrap();
    let seen: Vec<(&str, Status)> = history
        .iter()
        .map(|e| (e.actor.as_str(), e.status))
        .collect();
    assert_eq!(
        seen,
        [
            ("api:alice", Status::Pending),
            ("api:bob", Status::Pending),
            ("dispatcher", Status::Dispatched),
            ("sql", Status::Dead),
        ]
    );
    assert_eq!(history[0].schedule_time, now + Span::hours(1));
    assert_eq!(history[1].schedule_time, due, "the move is recorded");
    assert!(
        history.windows(2).all(|w| w[0].at <= w[1].at),
        "oldest first"
    );
    assert!(history.iter().all(|e| e.attempt == 1));
    alice.close().await;
    db.finish().await;
}

// ---------------------------------------------------------------------------
// modify

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_answers_applied_version_mismatch_or_not_pending() {
    let db = Db::new().await;
    let original = db
        .store
        .job_insert(&NewJob {
            headers: BTreeMap::from([("h".to_owned(), "1".to_owned())]),
            ..job_new("store-test", 3_600_000)
        })
        .await
        .unwrap()
        .0;
    let id = original.id;
    let at = db.store.db_now().await.unwrap() + Span::hours(2);
    let everything = JobChanges {
        schedule: Some(Schedule::At(at)),
        payload: Some((vec![1, 2, 3], PayloadKind::Bytes)),
        headers: Some(BTreeMap::from([("h".to_owned(), "2".to_owned())])),
        expiry: None,
        window: None,
        wall: Some(Some(WallClock {
            local: NaiveDate::from_ymd_opt(2031, 3, 30)
                .unwrap()
                .and_hms_milli_opt(9, 0, 0, 5)
                .unwrap(),
            zone: "Europe/Berlin".to_owned(),
            tzdata_version: "2031a".to_owned(),
        })),
        topic: None,
        on_topic: None,
    };
    let changed = match db.store.job_modify(id, 1, &everything).await.unwrap() {
        Modified::Applied(job, db_now) => {
            assert!(db_now >= job.updated_at);
            job
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(changed.version, 2);
    assert_eq!(changed.schedule_time, at);
    assert_eq!(changed.wall, everything.wall.clone().flatten());
    assert_eq!(db.store.job_get(id).await.unwrap().wall, changed.wall);
    assert_eq!(
        (changed.payload.as_slice(), changed.payload_kind),
        (&[1u8, 2, 3][..], PayloadKind::Bytes)
    );
    assert_eq!(changed.headers["h"], "2");
    assert_eq!(
        (changed.status, changed.attempt, changed.policy),
        (Status::Pending, 1, original.policy)
    );

    // A stale version changes nothing and shows the job as it is.
    let stale = JobChanges {
        payload: Some((b"\"lost\"".to_vec(), PayloadKind::Json)),
        ..JobChanges::default()
    };
    match db.store.job_modify(id, 1, &stale).await.unwrap() {
        Modified::VersionMismatch(job) => assert_eq!(job, changed),
        other => panic!("{other:?}"),
    }
    assert_eq!(db.store.job_get(id).await.unwrap(), changed);

    // A change leaves what it does not name; a delay counts from the
    // database's clock.
    let before = db.store.db_now().await.unwrap();
    let delayed = JobChanges {
        schedule: Some(Schedule::After { delay_ms: 60_000 }),
        ..JobChanges::default()
    };
    let job = match db.store.job_modify(id, 2, &delayed).await.unwrap() {
        Modified::Applied(job, db_now) => {
            assert!(job.schedule_time >= before + Span::seconds(60));
            assert!(job.schedule_time <= db_now + Span::seconds(60));
            job
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (job.payload, job.headers),
        (changed.payload, changed.headers)
    );

    db.store.job_cancel(id).await.unwrap();
    match db.store.job_modify(id, 4, &delayed).await.unwrap() {
        Modified::NotPending(job) => assert_eq!((job.status, job.version), (Status::Cancelled, 4)),
        other => panic!("{other:?}"),
    }
    let claimed = db.job(-1, 5).await;
    db.store
        .job_claim_many(&[claimed], 1, LEASE, &db.fence)
        .await
        .unwrap();
    assert!(matches!(
        db.store.job_modify(claimed, 2, &delayed).await.unwrap(),
        Modified::NotPending(j) if j.status == Status::Dispatching
    ));
    db.finish().await;
}

/// A schedule's occurrence moved on purpose is no longer one to skip when
/// late: a change of time clears its expiry, any other change keeps it. A
/// job's own expiry stays through a move, and a change of expiry sets it:
/// an instant, a span after the (new) time, or none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modify_clears_an_occurrences_expiry_when_it_moves_and_sets_a_jobs_own() {
    let db = Db::new().await;
    let expires = db.store.db_now().await.unwrap() + Span::hours(1);
    let (rows, _) = db
        .store
        .job_insert_many(&[
            NewJob {
                expires_at: Some(expires),
                schedule_id: Some(1),
                ..job_new("store-test", 60_000)
            },
            NewJob {
                expires_at: Some(expires),
                ..job_new("store-test", 60_000)
            },
        ])
        .await
        .unwrap();
    let (occurrence, own) = (created(&rows[0]).id, created(&rows[1]).id);
    let payload = JobChanges {
        payload: Some((b"1".to_vec(), PayloadKind::Json)),
        ..JobChanges::default()
    };
    assert!(matches!(
        db.store.job_modify(occurrence, 1, &payload).await.unwrap(),
        Modified::Applied(j, _) if j.expires_at == Some(expires)
    ));
    let moved = JobChanges {
        schedule: Some(Schedule::After { delay_ms: 1_000 }),
        ..JobChanges::default()
    };
    assert!(matches!(
        db.store.job_modify(occurrence, 2, &moved).await.unwrap(),
        Modified::Applied(j, _) if j.expires_at.is_none()
    ));
    assert!(matches!(
        db.store.job_modify(own, 1, &moved).await.unwrap(),
        Modified::Applied(j, _) if j.expires_at == Some(expires)
    ));
    let at = expires + Span::minutes(5);
    let retimed = JobChanges {
        schedule: Some(Schedule::At(at)),
        expiry: Some(Some(Expiry::AfterRun { ttl_ms: 90_000 })),
        ..JobChanges::default()
    };
    assert!(matches!(
        db.store.job_modify(own, 2, &retimed).await.unwrap(),
        Modified::Applied(j, _) if j.expires_at == Some(at + Span::seconds(90))
    ));
    let cleared = JobChanges {
        expiry: Some(None),
        ..JobChanges::default()
    };
    assert!(matches!(
        db.store.job_modify(own, 3, &cleared).await.unwrap(),
        Modified::Applied(j, _) if j.expires_at.is_none()
    ));
    db.finish().await;
}

// ---------------------------------------------------------------------------
// cancel

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_answers_for_each_state_of_the_job() {
    let db = Db::new().await;
    let pending = db.job(3_600_000, 5).await;
    assert!(
        matches!(db.store.job_cancel(pending).await.unwrap(), Cancelled::Applied(j) if j.status == Status::Cancelled)
    );
    assert!(matches!(
        db.store.job_cancel(pending).await.unwrap(),
        Cancelled::Already(_)
    ));

    let in_flight = db.job(-1, 5).await;
    let produced = db.job(-1, 5).await;
    let claim = db
        .store
        .job_claim_many(&[in_flight, produced], 1, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(claim.won.len(), 2);
    assert!(matches!(
        db.store.job_cancel(in_flight).await.unwrap(),
        Cancelled::InFlight(_)
    ));
    let marked = db
        .store
        .job_mark_dispatched_many(&[Dispatched {
            id: produced,
            token: 1,
            partition: 3,
            offset: 42,
            dispatched_at: Utc::now(),
            schedule_time: Utc::now(),
            attempt: 1,
        }])
        .await
        .unwrap();
    assert_eq!(marked.marked, 1);
    match db.store.job_cancel(produced).await.unwrap() {
        Cancelled::TooLate(job) => {
            assert_eq!((job.kafka_partition, job.kafka_offset), (Some(3), Some(42)))
        }
        other => panic!("{other:?}"),
    }
    assert!(db.store.job_cancel(999_999).await.is_err(), "no such job");
    db.finish().await;
}

/// An applied cancel is one event by its caller; a refused one changes
/// neither the row nor its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_records_who_cancelled_and_leaves_finished_jobs_alone() {
    let db = Db::new().await;
    let ops = db.store_as(Actor::Api).with_actor("api:ops");
    let pending = db.job(3_600_000, 5).await;
    match ops.job_cancel(pending).await.unwrap() {
        Cancelled::Applied(job) => assert_eq!(job.version, 2),
        other => panic!("{other:?}"),
    }
    let history = db.store.job_history(pending).await.unwrap();
    let last = history.last().unwrap();
    assert_eq!(
        (history.len(), last.actor.as_str(), last.status),
        (2, "api:ops", Status::Cancelled)
    );
    assert!(matches!(
        ops.job_cancel(pending).await.unwrap(),
        Cancelled::Already(j) if j.version == 2
    ));

    for finished in ["dead", "succeeded"] {
        let id = db.job(-1, 5).await;
        db.edit(
            &format!("UPDATE jobs SET status = '{finished}' WHERE id = ?"),
            id,
        )
        .await;
        let before = db.store.job_get(id).await.unwrap();
        let recorded = db.store.job_history(id).await.unwrap().len();
        assert!(
            matches!(ops.job_cancel(id).await.unwrap(), Cancelled::TooLate(_)),
            "{finished}"
        );
        assert_eq!(db.store.job_get(id).await.unwrap(), before, "{finished}");
        assert_eq!(
            db.store.job_history(id).await.unwrap().len(),
            recorded,
            "nothing recorded"
        );
    }
    ops.close().await;
    db.finish().await;
}

// ---------------------------------------------------------------------------
// topic controls (topics.rs)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_controls_are_made_by_the_first_change_and_each_change_keeps_what_it_leaves_out() {
    let db = Db::new().await;
    assert_eq!(db.store.topic_control("t").await.unwrap(), None);
    assert!(db.store.topic_controls().await.unwrap().is_empty());
    let set = |paused: Option<bool>, rate: Option<Option<u32>>, by: &'static str| {
        let store = db.store.clone();
        async move {
            let change = TopicChange {
                paused,
                max_per_second: rate,
                ..TopicChange::default()
            };
            let control = store.topic_control_set("t", &change, by).await.unwrap();
            (control.paused, control.max_per_second, control.updated_by)
        }
    };
    assert_eq!(
        set(Some(true), None, "api:ops").await,
        (true, None, "api:ops".into())
    );
    assert_eq!(
        set(None, Some(Some(50)), "api:pacer").await,
        (true, Some(50), "api:pacer".into())
    );
    assert_eq!(
        set(Some(false), None, "api:ops").await,
        (false, Some(50), "api:ops".into())
    );
    assert_eq!(
        set(None, Some(None), "api:ops").await,
        (false, None, "api:ops".into())
    );

    // The grouping is set and removed on its own, each field apart.
    let grouped = db
        .store
        .topic_control_set(
            "t",
            &TopicChange {
                group_by: Some(Some("header:tenant".into())),
                group_max_per_second: Some(Some(20)),
                ..TopicChange::default()
            },
            "api:ops",
        )
        .await
        .unwrap();
    assert_eq!(
        (
            grouped.group_by.as_deref(),
            grouped.group_max_per_second,
            grouped.paused
        ),
        (Some("header:tenant"), Some(20), false)
    );
    let ungrouped = db
        .store
        .topic_control_set(
            "t",
            &TopicChange {
                group_by: Some(None),
                ..TopicChange::default()
            },
            "api:ops",
        )
        .await
        .unwrap();
    assert_eq!(
        (ungrouped.group_by, ungrouped.group_max_per_second),
        (None, Some(20))
    );

    let other = db
        .store
        .topic_control_set("a", &TopicChange::default(), "api:ops")
        .await
        .unwrap();
    assert_eq!((other.paused, other.max_per_second), (false, None));
    let all: Vec<TopicControl> = db.store.topic_controls().await.unwrap();
    assert_eq!(
        all.iter().map(|c| c.topic.as_str()).collect::<Vec<_>>(),
        ["a", "t"]
    );
    assert_eq!(
        db.store.topic_control("t").await.unwrap().as_ref(),
        all.get(1)
    );
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_pending_jobs_and_the_topics_of_ids_are_read_by_id() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let overdue = job_at(&db, "held", now - Span::minutes(1)).await;
    let soon = job_at(&db, "held", now + Span::minutes(1)).await;
    let later = job_at(&db, "held", now + Span::hours(1)).await;
    let cancelled = job_at(&db, "held", now).await;
    db.store.job_cancel(cancelled).await.unwrap();
    let other = job_at(&db, "other", now).await;

    let until = now + Span::minutes(10);
    let pending = |after, limit| {
        let store = db.store.clone();
        async move {
            entry_ids(
                &store
                    .job_list_pending_topic("held", until, after, limit)
                    .await
                    .unwrap(),
            )
        }
    };
    let [first, second] = sorted([overdue, soon]);
    assert_eq!(pending(0, 100).await, [first, second]);
    assert_eq!(pending(first, 100).await, [second]);
    assert_eq!(pending(0, 1).await, [first]);
    assert!(!pending(0, 100).await.contains(&later));

    let topics: Vec<(u64, String, bool)> = db
        .store
        .job_pacing(&[other, overdue, 999_999], true, true)
        .await
        .unwrap()
        .into_iter()
        .map(|job| {
            assert_eq!(job.token, None, "created without a token");
            (job.id, job.topic, job.window_end.is_some())
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut expected = vec![
        (overdue, "held".to_owned(), false),
        (other, "other".to_owned(), false),
    ];
    expected.sort_unstable();
    assert_eq!(topics, expected, "ids without a row are left out");
    assert!(db
        .store
        .job_pacing(&[], false, false)
        .await
        .unwrap()
        .is_empty());
    db.finish().await;
}

// ---------------------------------------------------------------------------
// counts (stats.rs)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_are_by_topic_for_the_live_statuses_only_a_bounded_page_at_a_time() {
    let db = Db::new().await;
    let mut empty = Counts::default();
    empty
        .step(&db.store, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(empty.jobs().is_empty());
    assert!(
        empty.age().is_some(),
        "an empty table is counted through at once"
    );
    db.job(60_000, 5).await;
    db.job(60_000, 5).await;
    let claimed = db.job(-1_000, 5).await;
    db.store
        .job_claim_many(&[claimed], 1, LEASE, &db.fence)
        .await
        .unwrap();
    let sent = db.job(-1_000, 5).await;
    db.dispatch(&[sent], 2).await;
    let dead = db.job(60_000, 5).await;
    db.edit("UPDATE jobs SET status = 'dead' WHERE id = ?", dead)
        .await;
    db.store
        .job_insert(&job_new("other", 60_000))
        .await
        .unwrap();
    let cancelled = db
        .store
        .job_insert(&job_new("other", 60_000))
        .await
        .unwrap()
        .0
        .id;
    db.store.job_cancel(cancelled).await.unwrap();
    let succeeded = db
        .store
        .job_insert(&job_new("other", 60_000))
        .await
        .unwrap()
        .0
        .id;
    db.edit(
        "UPDATE jobs SET status = 'succeeded' WHERE id = ?",
        succeeded,
    )
    .await;

    // Dispatched, awaiting its result: no status_at, counted by id first.
    let awaiting = db.job(-1_000, 5).await;
    db.edit(
        "UPDATE jobs SET status = 'dispatched', ack_deadline = UTC_TIMESTAMP(3) + INTERVAL 1 HOUR \
         WHERE id = ?",
        awaiting,
    )
    .await;
    // Jobs due at the very same instant: the page's cursor breaks the tie by id.
    for _ in 0..3 {
        let tied = db.job(60_000, 5).await;
        db.edit(
            "UPDATE jobs SET schedule_time = '2031-01-01 00:00:00.000' WHERE id = ?",
            tied,
        )
        .await;
    }

    // Pages of 2 entries (and those sharing the last one's instant), one
    // a step: the first step counts some of the 5 pending jobs, not all.
    let mut stepped = Counts::with_page(2);
    stepped.step(&db.store, Duration::ZERO).await.unwrap();
    let partial: u64 = stepped.jobs().iter().map(|c| c.count).sum();
    assert!((1..5).contains(&partial), "one page of two: {partial}");
    assert!(stepped.age().is_none());
    let mut steps = 1;
    while stepped.age().is_none() {
        stepped.step(&db.store, Duration::ZERO).await.unwrap();
        steps += 1;
        assert!(steps < 100, "the count completes");
    }
    // Counted all at once, with a budget that reads them all.
    let mut whole = Counts::default();
    whole
        .step(&db.store, Duration::from_secs(60))
        .await
        .unwrap();
    let sorted = |counts: &Counts| {
        let mut jobs = counts.jobs();
        jobs.sort_by(|a, b| (&a.topic, &a.status).cmp(&(&b.topic, &b.status)));
        jobs
    };
    assert_eq!(
        sorted(&stepped),
        sorted(&whole),
        "paged or not, the same count"
    );
    let counts = sorted(&whole);
    let count = |topic: &str, status: &str, count| TopicCount {
        topic: topic.to_owned(),
        status: status.to_owned(),
        count,
    };
    assert_eq!(
        counts,
        [
            count("other", "pending", 1),
            count("store-test", "dead", 1),
            count("store-test", "dispatched", 2),
            count("store-test", "dispatching", 1),
            count("store-test", "pending", 5),
        ]
    );
    db.finish().await;
}

/// What is due, what the window holds and when the next job is due, by
/// the database's clock; a paused topic's jobs are held on purpose and
/// counted by none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overdue_window_and_next_due_leave_paused_topics_out() {
    let db = Db::new().await;
    assert_eq!(db.store.job_overdue().await.unwrap().count, 0);
    assert_eq!(db.store.job_overdue().await.unwrap().oldest_age_ms, 0);
    assert_eq!(db.store.job_next_due_in().await.unwrap(), None);
    assert_eq!(
        db.store
            .job_window_count(Duration::from_secs(600))
            .await
            .unwrap(),
        0
    );

    let now = db.store.db_now().await.unwrap();
    let oldest = job_at(&db, "store-test", now - Span::seconds(60)).await;
    let overdue = job_at(&db, "store-test", now - Span::seconds(1)).await;
    let soon = job_at(&db, "store-test", now + Span::minutes(5)).await;
    job_at(&db, "store-test", now + Span::hours(1)).await;
    job_at(&db, "held", now - Span::minutes(10)).await;
    let claimed = job_at(&db, "store-test", now - Span::minutes(20)).await;
    db.store
        .job_claim_many(&[claimed], 1, LEASE, &db.fence)
        .await
        .unwrap();
    db.store
        .topic_control_set(
            "held",
            &TopicChange {
                paused: Some(true),
                ..TopicChange::default()
            },
            "api:ops",
        )
        .await
        .unwrap();

    let due = db.store.job_overdue().await.unwrap();
    assert_eq!(due.count, 2);
    assert!(
        (60_000..120_000).contains(&due.oldest_age_ms),
        "the oldest due is a minute late: {}",
        due.oldest_age_ms
    );
    let next = db.store.job_next_due_in().await.unwrap().unwrap();
    assert!(next <= -60_000, "overdue: negative ({next})");
    let window = Duration::from_secs(600);
    assert_eq!(
        db.store.job_window_count(window).await.unwrap(),
        4,
        "three pending within the window and one claim"
    );
    assert_eq!(db.store.job_window_count(Duration::ZERO).await.unwrap(), 3);
    let listed = db.store.job_window_pending(window, 100).await.unwrap();
    assert_eq!(
        listed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [oldest, overdue, soon],
        "soonest first"
    );
    assert_eq!(listed[0].1, now - Span::seconds(60));
    assert_eq!(
        db.store.job_window_pending(window, 1).await.unwrap().len(),
        1
    );
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_claims_are_counted_with_the_age_of_the_oldest() {
    let db = Db::new().await;
    assert_eq!(db.store.job_claims_expired().await.unwrap(), (0, 0));
    let live = db.job(-1_000, 5).await;
    let lapsed = db.job(-1_000, 5).await;
    db.store
        .job_claim_many(&[live, lapsed], 1, LEASE, &db.fence)
        .await
        .unwrap();
    db.edit(
        "UPDATE jobs SET claim_expires_at = UTC_TIMESTAMP(3) - INTERVAL 5 SECOND WHERE id = ?",
        lapsed,
    )
    .await;
    // Set `dispatching` by hand: no lease (the placeholder it was created
    // with, or NULL), not an expired claim.
    let by_hand = db.job(-1_000, 5).await;
    let nulls = db.job(-1_000, 5).await;
    db.edit(
        "UPDATE jobs SET status = 'dispatching' WHERE id = ?",
        by_hand,
    )
    .await;
    db.edit(
        "UPDATE jobs SET status = 'dispatching', claim_expires_at = NULL WHERE id = ?",
        nulls,
    )
    .await;
    let (count, age_ms) = db.store.job_claims_expired().await.unwrap();
    assert_eq!(count, 1);
    assert!((5_000..65_000).contains(&age_ms), "{age_ms}");
    db.finish().await;
}

/// The samples the truth report and the doctor read: lateness of recent
/// dispatches, recorded positions, statuses by id, and jobs that died in a
/// span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_read_recent_dispatches_positions_statuses_and_deaths() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let recent = job_at(&db, "store-test", now - Span::minutes(5)).await;
    let old = job_at(&db, "store-test", now - Span::hours(3)).await;
    let waiting = job_at(&db, "store-test", now - Span::minutes(1)).await;
    db.dispatch(&[recent, old], 1).await;
    let finished = job_at(&db, "store-test", now - Span::minutes(2)).await;
    db.dispatch(&[finished], 2).await;
    db.edit(
        "UPDATE jobs SET status = 'succeeded' WHERE id = ?",
        finished,
    )
    .await;

    let sample = db
        .store
        .job_lateness_sample(Duration::from_secs(3_600), 10)
        .await
        .unwrap();
    let mut runs: Vec<DateTime<Utc>> = sample.iter().map(|(at, _)| *at).collect();
    runs.sort_unstable();
    assert_eq!(
        runs,
        [now - Span::minutes(5), now - Span::minutes(2)],
        "dispatched and succeeded jobs due within the span"
    );
    assert!(sample.iter().all(|(at, sent)| sent >= at));
    assert_eq!(
        db.store
            .job_lateness_sample(Duration::from_secs(3_600), 0)
            .await
            .unwrap()
            .len(),
        0
    );

    let mut positions = db.store.job_positions_recent(10).await.unwrap();
    positions.sort_by_key(|p| p.id);
    assert_eq!(
        positions
            .iter()
            .map(|p| (p.id, p.topic.as_str(), p.partition, p.offset))
            .collect::<Vec<_>>(),
        sorted([
            (recent, "store-test", 0, recent as i64),
            (old, "store-test", 0, old as i64),
            (finished, "store-test", 0, finished as i64),
        ])
    );
    assert_eq!(
        db.store.job_positions_recent(1).await.unwrap().len(),
        2,
        "at most one of each status"
    );

    let statuses = db
        .store
        .job_statuses(&[recent, waiting, finished, 999_999])
        .await
        .unwrap();
    assert_eq!(
        statuses,
        HashMap::from([
            (recent, Status::Dispatched),
            (waiting, Status::Pending),
            (finished, Status::Succeeded),
        ])
    );
    assert!(db.store.job_statuses(&[]).await.unwrap().is_empty());

    let since = db.store.db_now().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    db.edit("UPDATE jobs SET status = 'dead' WHERE id = ?", waiting)
        .await;
    let until = db.store.db_now().await.unwrap();
    let dead = db.store.job_dead_between(since, until, 10).await.unwrap();
    assert_eq!(
        dead.iter()
            .map(|(id, topic, _)| (*id, topic.as_str()))
            .collect::<Vec<_>>(),
        [(waiting, "store-test")]
    );
    assert!(dead[0].2 > since && dead[0].2 <= until);
    assert!(db
        .store
        .job_dead_between(until, until + Span::hours(1), 10)
        .await
        .unwrap()
        .is_empty());
    db.finish().await;
}

/// `items` in ascending order.
fn sorted<T: Ord, const N: usize>(mut items: [T; N]) -> [T; N] {
    items.sort();
    items
}

// ---------------------------------------------------------------------------
// ids known before the write (src/store/id_blocks.rs)

/// A plain job with `key` on `topic` due in an hour.
fn keyed(topic: &str, key: &str) -> NewJob {
    NewJob {
        key: Some(key.to_owned()),
        ..job_new(topic, 3_600_000)
    }
}

/// What the row `id` holds as (topic, payload): to show a row is untouched.
async fn row_of(db: &Db, id: JobId) -> (String, Vec<u8>) {
    sqlx::query_as("SELECT CAST(topic AS CHAR), payload FROM jobs WHERE id = ?")
        .bind(id)
        .fetch_one(&db.sql)
        .await
        .unwrap()
}

/// A row inserted as a build before the id blocks does, or a person: by
/// the table's AUTO_INCREMENT, or at `id` when given.
async fn inserted_beside(db: &Db, id: Option<JobId>) -> JobId {
    let done = sqlx::query(
        "INSERT INTO jobs (id, topic, payload, payload_kind, schedule_time) \
         VALUES (?, 'beside', 'by hand', 'bytes', UTC_TIMESTAMP(3) + INTERVAL 1 DAY)",
    )
    .bind(id)
    .execute(&db.sql)
    .await
    .unwrap();
    id.unwrap_or(done.last_insert_id())
}

/// A row that took the id a handle was about to give — by hand, by an
/// older build's counter, by a restore — costs the write a retry with a
/// fresh block: the job is created once, under another id, and the row
/// that was there first is left as it was. Single creates and batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_taken_beside_its_block_costs_a_retry_and_never_a_job() {
    let db = Db::new().await;
    let api = db.store_as(Actor::Api);
    let first = api.job_insert(&keyed("ids", "first")).await.unwrap().0.id;
    // The handle's next single create would be `first + 1`, the id the
    // table's AUTO_INCREMENT gives next too.
    let squatter = inserted_beside(&db, None).await;
    assert_eq!(squatter, first + 1);
    let (second, _) = api.job_insert(&keyed("ids", "second")).await.unwrap();
    assert_ne!(second.id, squatter);
    assert_eq!(second.key.as_deref(), Some("second"));

    // Now handed out from the top down: rows by AUTO_INCREMENT land above
    // the whole block.
    let counted = inserted_beside(&db, None).await;
    assert!(counted > first && counted > second.id);

    // A batch of three would take the three ids below `second`: one taken.
    let taken = inserted_beside(&db, Some(second.id - 2)).await;
    let batch = [keyed("ids", "a"), keyed("ids", "b"), keyed("ids", "first")];
    let (rows, _) = api.job_insert_many(&batch).await.unwrap();
    let (a, b) = (created(&rows[0]), created(&rows[1]));
    assert!(matches!(rows[2], BatchRow::Duplicate), "its key is taken");
    assert_eq!((a.key.as_deref(), b.key.as_deref()), (Some("a"), Some("b")));
    let mut all = vec![first, second.id, a.id, b.id, squatter, counted, taken];
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 7, "every row has an id of its own");
    for id in [squatter, counted, taken] {
        assert_eq!(
            row_of(&db, id).await,
            ("beside".to_owned(), b"by hand".to_vec()),
            "row {id} is as it was written"
        );
    }
    for (id, key) in [
        (first, "first"),
        (second.id, "second"),
        (a.id, "a"),
        (b.id, "b"),
    ] {
        let job = api.job_get(id).await.unwrap();
        assert_eq!(job.key.as_deref(), Some(key), "job {id}");
    }
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
        .fetch_one(&db.sql)
        .await
        .unwrap();
    assert_eq!(count, 7, "nothing written twice, nothing lost");
    db.finish().await;
}

/// The sequence's row is hostile input too: set behind the table, past
/// the largest id, or deleted, a new handle still creates jobs, each under
/// an id of its own at most 2^53 - 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_set_id_sequence_costs_no_create() {
    let db = Db::new().await;
    let mut ids = vec![
        db.store_as(Actor::Api)
            .job_insert(&keyed("ids", "start"))
            .await
            .unwrap()
            .0
            .id,
    ];
    for (n, edit) in [
        "UPDATE id_blocks SET next_id = 0",
        "UPDATE id_blocks SET next_id = 18446744073709551615",
        "UPDATE id_blocks SET next_id = 9007199254740990",
        "DELETE FROM id_blocks",
    ]
    .into_iter()
    .enumerate()
    {
        sqlx::query(edit).execute(&db.sql).await.unwrap();
        // A handle of its own: no block left from before the edit.
        let api = db.store_as(Actor::Api);
        let (job, _) = api
            .job_insert(&keyed("ids", &format!("after-{n}")))
            .await
            .unwrap_or_else(|err| panic!("after {edit}: {err}"));
        assert!(job.id < 1 << 53, "after {edit}: {}", job.id);
        assert!(!ids.contains(&job.id), "after {edit}: {} again", job.id);
        ids.push(job.id);
        api.close().await;
    }
    db.finish().await;
}
