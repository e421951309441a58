//! The store's methods for bulk operations (src/store/bulk.rs): which jobs
//! a filter covers, the operation's row, and each action applied batch by
//! batch with the operation's progress — what each answers, what it leaves
//! in the jobs and their history, and what it leaves alone.

use std::time::Duration;

use chrono::{Duration as Span, Utc};
use tickler::domain::job::{Job, JobId, NewJob, Schedule, Status};
use tickler::store::{Actor, BatchRow, BulkAction, BulkFilter, BulkOp, BulkStatus, Store};
use tickler_testkit::store::{job_new, Db, LEASE};

fn ids(jobs: &[Job]) -> Vec<JobId> {
    let mut ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
    ids.sort_unstable();
    ids
}

async fn keyed(db: &Db, topic: &str, key: Option<&str>, in_ms: i64) -> JobId {
    let job = NewJob {
        key: key.map(str::to_owned),
        ..job_new(topic, in_ms)
    };
    db.store.job_insert(&job).await.unwrap().0.id
}

/// Records an operation of `action` over `filter` owned by `owner`, as the
/// API does: over the jobs there are now.
async fn op_create(db: &Db, filter: BulkFilter, action: BulkAction, owner: u64) -> BulkOp {
    let max_id = db.store.job_max_id().await.unwrap();
    let (total, _) = db
        .store
        .bulk_count(&filter, max_id, action.applies_to())
        .await
        .unwrap();
    let id = db
        .store
        .bulk_create("api:ops", &filter, &action, max_id, total, owner)
        .await
        .unwrap();
    db.store.bulk_get(id).await.unwrap().unwrap()
}

/// The actor the bulk runner writes as.
fn runner(db: &Db, op: &BulkOp) -> Store {
    db.store_as(Actor::Api)
        .with_actor(&format!("bulk:{}", op.id))
}

fn topic(name: &str) -> BulkFilter {
    BulkFilter {
        topic: Some(name.to_owned()),
        ..BulkFilter::default()
    }
}

fn no_attempts(_: &str) -> u32 {
    panic!("no default attempts asked for")
}

fn any_payload(_: &Job) -> bool {
    true
}

// ---------------------------------------------------------------------------
// max_id, get_many, count, sample

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_id_and_get_many_read_the_jobs_there_are() {
    let db = Db::new().await;
    assert_eq!(db.store.job_max_id().await.unwrap(), 0, "no job yet");
    let a = db.job(60_000, 1).await;
    let b = db.job(60_000, 1).await;
    let c = db.job(60_000, 1).await;
    assert_eq!(db.store.job_max_id().await.unwrap(), c);
    let got = db.store.job_get_many(&[c, a, 404_404]).await.unwrap();
    assert_eq!(ids(&got), [a, c], "ids without a row are left out");
    assert!(got.iter().all(|j| j.payload.is_empty()), "without payloads");
    assert_eq!(got.iter().find(|j| j.id == a).unwrap().topic, "store-test");
    assert!(db.store.job_get_many(&[]).await.unwrap().is_empty());
    assert_eq!(ids(&db.store.job_get_many(&[b]).await.unwrap()), [b]);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_and_sample_apply_every_condition_of_the_filter() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let hour = |n: i64| now + Span::hours(n);
    let at = |topic: &'static str, key: Option<&'static str>, when| {
        let store = db.store.clone();
        async move {
            let job = NewJob {
                key: key.map(str::to_owned),
                schedule: Schedule::At(when),
                ..job_new(topic, 0)
            };
            store.job_insert(&job).await.unwrap().0.id
        }
    };
    let a = at("orders", Some("order-1"), hour(1)).await;
    let b = at("orders", Some("order_2"), hour(2)).await;
    let c = at("orders", Some("orderX3"), hour(3)).await;
    let d = at("orders", None, hour(4)).await;
    db.store.job_cancel(d).await.unwrap();
    let e = at("other", Some("order_9"), hour(1)).await;
    let max = db.store.job_max_id().await.unwrap();

    let count = |filter: BulkFilter, max_id, status| {
        let store = db.store.clone();
        async move { store.bulk_count(&filter, max_id, status).await.unwrap() }
    };
    assert_eq!(count(topic("orders"), max, Status::Pending).await, (4, 3));
    assert_eq!(count(topic("orders"), max, Status::Cancelled).await, (4, 1));
    assert_eq!(
        count(topic("orders"), b, Status::Pending).await,
        (2, 2),
        "up to max_id"
    );
    let status = BulkFilter {
        status: Some(Status::Cancelled),
        ..topic("orders")
    };
    assert_eq!(count(status, max, Status::Pending).await, (1, 0));
    let prefix = |p: &str| BulkFilter {
        key_prefix: Some(p.to_owned()),
        ..BulkFilter::default()
    };
    assert_eq!(
        count(prefix("order_"), max, Status::Pending).await,
        (2, 2),
        "'_' is itself: order_2 and order_9"
    );
    assert_eq!(count(prefix("order"), max, Status::Pending).await, (4, 4));
    let window = BulkFilter {
        run_at_from: Some(hour(2)),
        run_at_to: Some(hour(4)),
        ..BulkFilter::default()
    };
    assert_eq!(count(window, max, Status::Pending).await, (2, 2), "b and c");
    let listed = |ids: Vec<JobId>| BulkFilter {
        ids: Some(ids),
        ..BulkFilter::default()
    };
    assert_eq!(
        count(listed(vec![a, e, 404_404]), max, Status::Pending).await,
        (2, 2)
    );
    assert_eq!(
        count(listed(vec![]), max, Status::Pending).await,
        (0, 0),
        "an empty list matches nothing"
    );
    let patterns = BulkFilter {
        topic_patterns: Some(vec!["oth*".to_owned()]),
        ..BulkFilter::default()
    };
    assert_eq!(count(patterns.clone(), max, Status::Pending).await, (1, 1));
    assert_eq!(
        count(BulkFilter::default(), 0, Status::Pending).await,
        (0, 0)
    );

    let sample = db.store.bulk_sample(&topic("orders"), 2).await.unwrap();
    assert_eq!(sample.iter().map(|j| j.id).collect::<Vec<_>>(), [a, b]);
    assert!(sample.iter().all(|j| j.payload.is_empty()));
    let sample = db.store.bulk_sample(&patterns, 10).await.unwrap();
    assert_eq!(sample.iter().map(|j| j.id).collect::<Vec<_>>(), [e]);
    assert!(!db
        .store
        .bulk_sample(&BulkFilter::default(), 10)
        .await
        .unwrap()
        .iter()
        .any(|j| j.id == 404_404 || j.id > max));
    let window = BulkFilter {
        run_at_from: Some(hour(2)),
        run_at_to: Some(hour(4)),
        ..BulkFilter::default()
    };
    let sample = db.store.bulk_sample(&window, 10).await.unwrap();
    assert_eq!(sample.iter().map(|j| j.id).collect::<Vec<_>>(), [b, c]);
    db.finish().await;
}

// ---------------------------------------------------------------------------
// create, get, list, next

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_is_stored_as_given_and_listed_newest_first() {
    let db = Db::new().await;
    db.job(60_000, 1).await;
    let filter = BulkFilter {
        topic: Some("orders".to_owned()),
        key_prefix: Some("eu-".to_owned()),
        topic_patterns: Some(vec!["orders*".to_owned()]),
        ..BulkFilter::default()
    };
    let action = BulkAction::Shift { by_ms: -5_000 };
    let before = db.store.db_now().await.unwrap();
    let id = db
        .store
        .bulk_create("api:ops", &filter, &action, 41, 12, 777)
        .await
        .unwrap();
    let op = db.store.bulk_get(id).await.unwrap().expect("stored");
    assert_eq!(
        (op.created_by.as_str(), &op.filter, &op.action),
        ("api:ops", &filter, &action)
    );
    assert_eq!(op.status, BulkStatus::Running);
    assert_eq!(
        (
            op.max_id,
            op.cursor_id,
            op.total,
            op.done,
            op.changed,
            op.skipped,
            op.owner_token
        ),
        (41, 0, 12, 0, 0, 0, 777)
    );
    assert!(op.errors.is_empty());
    assert!(op.created_at >= before && op.updated_at == op.created_at);
    assert_eq!(op.finished_at, None);
    assert!(db.store.bulk_get(404_404).await.unwrap().is_none());

    let second = db
        .store
        .bulk_create(
            "api:ops",
            &BulkFilter::default(),
            &BulkAction::Cancel {},
            41,
            0,
            778,
        )
        .await
        .unwrap();
    let listed: Vec<u64> = db
        .store
        .bulk_list(10)
        .await
        .unwrap()
        .iter()
        .map(|o| o.id)
        .collect();
    assert_eq!(listed, [second, id]);
    assert_eq!(db.store.bulk_list(1).await.unwrap().len(), 1);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_walks_the_filter_from_the_cursor_up_to_the_newest_job_it_started_with() {
    let db = Db::new().await;
    let a = db.job(60_000, 1).await;
    db.store
        .job_insert(&job_new("other", 60_000))
        .await
        .unwrap();
    let b = db.job(60_000, 1).await;
    let c = db.job(60_000, 1).await;
    let mut op = op_create(&db, topic("store-test"), BulkAction::Cancel {}, 1).await;
    let after_start = db.job(60_000, 1).await;

    let first = db.store.bulk_next(&op, 2).await.unwrap();
    assert_eq!(
        first,
        [(a, "store-test".to_owned()), (b, "store-test".to_owned())]
    );
    op.cursor_id = b;
    let rest = db.store.bulk_next(&op, 10).await.unwrap();
    assert_eq!(
        rest,
        [(c, "store-test".to_owned())],
        "jobs made after it started are not its"
    );
    op.cursor_id = c;
    assert!(db.store.bulk_next(&op, 10).await.unwrap().is_empty());
    assert!(after_start > op.max_id);
    db.finish().await;
}

// ---------------------------------------------------------------------------
// apply

/// A batch changes the jobs still in the action's status and still
/// matching the filter, skips the rest, and moves the operation past all of
/// them, in one transaction; the history names the operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_cancels_what_is_still_pending_skips_the_rest_and_moves_the_cursor() {
    let db = Db::new().await;
    let pending = db.job(60_000, 1).await;
    let claimed = db.job(-1_000, 1).await;
    let moved_out = keyed(&db, "store-test", Some("eu-1"), 60_000).await;
    let also_pending = keyed(&db, "store-test", Some("eu-2"), 60_000).await;
    let filter = BulkFilter {
        run_at_to: Some(Utc::now() + Span::minutes(30)),
        ..topic("store-test")
    };
    let op = op_create(&db, filter, BulkAction::Cancel {}, 5).await;
    assert_eq!(op.total, 4);
    let batch = db.store.bulk_next(&op, 100).await.unwrap();
    assert_eq!(batch.len(), 4);
    // Between the read and the batch: one is claimed, one moved beyond the
    // filter's window.
    db.store
        .job_claim_many(&[claimed], 1, LEASE, &db.fence)
        .await
        .unwrap();
    db.edit(
        "UPDATE jobs SET schedule_time = schedule_time + INTERVAL 1 DAY WHERE id = ?",
        moved_out,
    )
    .await;

    let store = runner(&db, &op);
    let done = store
        .bulk_apply(&op, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .expect("the operation is where it says");
    assert_eq!(
        (done.changed.clone(), done.skipped),
        (vec![pending, also_pending], 2)
    );
    for id in [pending, also_pending] {
        let job = db.store.job_get(id).await.unwrap();
        assert_eq!((job.status, job.version), (Status::Cancelled, 2));
        let last = db.store.job_history(id).await.unwrap().pop().unwrap();
        assert_eq!(
            (last.actor, last.status),
            (format!("bulk:{}", op.id), Status::Cancelled)
        );
    }
    assert_eq!(
        db.store.job_get(claimed).await.unwrap().status,
        Status::Dispatching
    );
    assert_eq!(
        db.store.job_get(moved_out).await.unwrap().status,
        Status::Pending
    );
    let progressed = db.store.bulk_get(op.id).await.unwrap().unwrap();
    assert_eq!(
        (
            progressed.cursor_id,
            progressed.done,
            progressed.changed,
            progressed.skipped
        ),
        (also_pending, 4, 2, 2)
    );
    assert_eq!(progressed.status, BulkStatus::Running);
    assert!(progressed.updated_at >= op.updated_at);
    store.close().await;
    db.finish().await;
}

/// `None`: the operation is no longer where the caller's copy says (taken
/// over, finished, or this batch committed already): nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_writes_nothing_for_an_operation_that_moved_on() {
    let db = Db::new().await;
    let first = db.job(60_000, 1).await;
    let second = db.job(60_000, 1).await;
    let op = op_create(&db, topic("store-test"), BulkAction::Cancel {}, 5).await;
    let batch = vec![(first, "store-test".to_owned())];
    assert!(db
        .store
        .bulk_apply(&op, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .is_some());

    // The same batch again, with the copy from before it: already applied.
    let again = vec![(second, "store-test".to_owned())];
    assert!(db
        .store
        .bulk_apply(&op, &again, no_attempts, any_payload)
        .await
        .unwrap()
        .is_none());
    // Another owner's copy.
    let current = db.store.bulk_get(op.id).await.unwrap().unwrap();
    let stolen = BulkOp {
        owner_token: 6,
        ..current.clone()
    };
    assert!(db
        .store
        .bulk_apply(&stolen, &again, no_attempts, any_payload)
        .await
        .unwrap()
        .is_none());
    // A finished operation.
    assert!(db
        .store
        .bulk_finish(&current, BulkStatus::Done, None)
        .await
        .unwrap());
    assert!(db
        .store
        .bulk_apply(&current, &again, no_attempts, any_payload)
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        db.store.job_get(second).await.unwrap().status,
        Status::Pending,
        "rolled back with the progress it could not record"
    );
    let after = db.store.bulk_get(op.id).await.unwrap().unwrap();
    assert_eq!((after.cursor_id, after.done), (first, 1));

    // An empty batch is nothing to do.
    let empty = db
        .store
        .bulk_apply(&current, &[], no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    assert!(empty.changed.is_empty() && empty.skipped == 0);
    db.finish().await;
}

/// A move on purpose is no longer a misfire: shift and move clear the
/// expiry of the schedule's occurrences they move. A job's own expiry
/// (`expires_at` on create) moves with a shift and stays through a move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_shifts_and_moves_pending_jobs_clearing_only_an_occurrences_expiry() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let due_at = now + Span::hours(1);
    let expires_at = due_at + Span::minutes(1);
    let expiring = |topic: &str, schedule_id: Option<u64>| NewJob {
        schedule: Schedule::At(due_at),
        expires_at: Some(expires_at),
        schedule_id,
        ..job_new(topic, 0)
    };
    let (rows, _) = db
        .store
        .job_insert_many(&[
            expiring("shifted", Some(1)),
            expiring("shifted", None),
            expiring("moved", Some(1)),
            expiring("moved", None),
        ])
        .await
        .unwrap();
    let ids: Vec<u64> = rows
        .iter()
        .map(|row| match row {
            BatchRow::Created(job) => job.id,
            BatchRow::Duplicate => panic!("no keys here"),
        })
        .collect();

    let shift = op_create(
        &db,
        topic("shifted"),
        BulkAction::Shift { by_ms: -90_000 },
        1,
    )
    .await;
    let batch = db.store.bulk_next(&shift, 10).await.unwrap();
    db.store
        .bulk_apply(&shift, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    let occurrence = db.store.job_get(ids[0]).await.unwrap();
    assert_eq!(
        (
            occurrence.schedule_time,
            occurrence.expires_at,
            occurrence.version
        ),
        (due_at - Span::seconds(90), None, 2)
    );
    let last = db.store.job_history(ids[0]).await.unwrap().pop().unwrap();
    assert_eq!(last.schedule_time, due_at - Span::seconds(90));
    let own = db.store.job_get(ids[1]).await.unwrap();
    assert_eq!(
        (own.schedule_time, own.expires_at),
        (
            due_at - Span::seconds(90),
            Some(expires_at - Span::seconds(90))
        )
    );

    let run_at = now + Span::days(2);
    let relocate = op_create(&db, topic("moved"), BulkAction::Move { run_at }, 2).await;
    let batch = db.store.bulk_next(&relocate, 10).await.unwrap();
    db.store
        .bulk_apply(&relocate, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    let occurrence = db.store.job_get(ids[2]).await.unwrap();
    assert_eq!(
        (occurrence.schedule_time, occurrence.expires_at),
        (run_at, None)
    );
    let own = db.store.job_get(ids[3]).await.unwrap();
    assert_eq!(
        (own.schedule_time, own.expires_at),
        (run_at, Some(expires_at)),
        "kept: it ends expired, unsent, when it falls due"
    );

    // A job with a window: shifted with it; moved, exactly to the new time,
    // its window gone.
    let (rows, _) = db
        .store
        .job_insert_many(&[NewJob {
            schedule: Schedule::At(due_at + Span::seconds(7)),
            window: Some(tickler::domain::job::Window {
                ms: 60_000,
                start: Schedule::At(due_at),
            }),
            ..job_new("windowed", 0)
        }])
        .await
        .unwrap();
    let windowed = match &rows[0] {
        BatchRow::Created(job) => job.id,
        BatchRow::Duplicate => panic!("no keys here"),
    };
    let shift = op_create(
        &db,
        topic("windowed"),
        BulkAction::Shift { by_ms: 60_000 },
        3,
    )
    .await;
    let batch = db.store.bulk_next(&shift, 10).await.unwrap();
    db.store
        .bulk_apply(&shift, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    let job = db.store.job_get(windowed).await.unwrap();
    assert_eq!(
        (job.window_start, job.schedule_time),
        (
            Some(due_at + Span::minutes(1)),
            due_at + Span::minutes(1) + Span::seconds(7)
        )
    );
    let moved_to = now + Span::days(3);
    let relocate = op_create(
        &db,
        topic("windowed"),
        BulkAction::Move { run_at: moved_to },
        4,
    )
    .await;
    let batch = db.store.bulk_next(&relocate, 10).await.unwrap();
    db.store
        .bulk_apply(&relocate, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    let job = db.store.job_get(windowed).await.unwrap();
    assert_eq!(
        (job.window_start, job.schedule_time, job.window_ms),
        (None, moved_to, None)
    );
    db.finish().await;
}

/// Redrive takes dead jobs only: pending again, due now, the attempt number
/// going on, with the given attempts or the topic's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_redrives_dead_jobs_with_the_given_attempts_or_their_topics() {
    let db = Db::new().await;
    let given = db
        .store
        .job_insert(&job_new("given", 60_000))
        .await
        .unwrap()
        .0
        .id;
    let by_topic = db
        .store
        .job_insert(&job_new("by-topic", 60_000))
        .await
        .unwrap()
        .0
        .id;
    let alive = db
        .store
        .job_insert(&job_new("given", 60_000))
        .await
        .unwrap()
        .0
        .id;
    for id in [given, by_topic] {
        db.edit(
            "UPDATE jobs SET status = 'dead', attempt = 2, max_attempts = 2 WHERE id = ?",
            id,
        )
        .await;
    }
    let dead = BulkFilter {
        ids: Some(vec![given, alive]),
        ..BulkFilter::default()
    };
    let op = op_create(
        &db,
        dead,
        BulkAction::Redrive {
            max_attempts: Some(3),
        },
        1,
    )
    .await;
    assert_eq!(op.total, 2);
    let batch = db.store.bulk_next(&op, 10).await.unwrap();
    let before = db.store.db_now().await.unwrap();
    let done = db
        .store
        .bulk_apply(&op, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((done.changed, done.skipped), (vec![given], 1));
    let job = db.store.job_get(given).await.unwrap();
    assert_eq!(
        (job.status, job.attempt, job.policy.max_attempts),
        (Status::Pending, 3, 5)
    );
    assert!(job.schedule_time >= before, "due now");
    assert_eq!(
        db.store.job_get(alive).await.unwrap().version,
        1,
        "not dead: skipped"
    );

    let op = op_create(
        &db,
        topic("by-topic"),
        BulkAction::Redrive { max_attempts: None },
        2,
    )
    .await;
    let batch = db.store.bulk_next(&op, 10).await.unwrap();
    let asked = std::sync::Mutex::new(Vec::new());
    db.store
        .bulk_apply(
            &op,
            &batch,
            |topic| {
                asked.lock().unwrap().push(topic.to_owned());
                4
            },
            any_payload,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*asked.lock().unwrap(), ["by-topic"]);
    let job = db.store.job_get(by_topic).await.unwrap();
    assert_eq!(
        (job.status, job.attempt, job.policy.max_attempts),
        (Status::Pending, 3, 6)
    );
    db.finish().await;
}

/// A new policy changes what it names and keeps the rest; attempts never
/// fall below the attempt a job is at, and the backoff base never exceeds
/// its cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_policy_changes_what_it_names_within_the_jobs_bounds() {
    let db = Db::new().await;
    let fresh = db.job(60_000, 5).await;
    let retried = db.job(60_000, 5).await;
    db.edit("UPDATE jobs SET attempt = 3 WHERE id = ?", retried)
        .await;
    let original = db.store.job_get(fresh).await.unwrap().policy;

    let op = op_create(
        &db,
        topic("store-test"),
        BulkAction::Policy {
            expects_result: Some(true),
            max_attempts: Some(2),
            backoff_base_ms: None,
            backoff_cap_ms: Some(500),
            ack_timeout_ms: None,
        },
        1,
    )
    .await;
    let batch = db.store.bulk_next(&op, 10).await.unwrap();
    db.store
        .bulk_apply(&op, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    let fresh_policy = db.store.job_get(fresh).await.unwrap().policy;
    assert!(fresh_policy.expects_result);
    assert_eq!(
        (
            fresh_policy.max_attempts,
            fresh_policy.backoff_cap_ms,
            fresh_policy.backoff_base_ms,
            fresh_policy.ack_timeout_ms
        ),
        (2, 500, 500, original.ack_timeout_ms),
        "the base follows the cap down; the ack timeout is kept"
    );
    assert_eq!(
        db.store.job_get(retried).await.unwrap().policy.max_attempts,
        3,
        "never below the attempt it is at"
    );

    let op = op_create(
        &db,
        topic("store-test"),
        BulkAction::Policy {
            expects_result: None,
            max_attempts: None,
            backoff_base_ms: Some(9_000),
            backoff_cap_ms: None,
            ack_timeout_ms: Some(20_000),
        },
        2,
    )
    .await;
    let batch = db.store.bulk_next(&op, 10).await.unwrap();
    db.store
        .bulk_apply(&op, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    let policy = db.store.job_get(fresh).await.unwrap().policy;
    assert_eq!(
        (
            policy.expects_result,
            policy.max_attempts,
            policy.backoff_base_ms,
            policy.ack_timeout_ms
        ),
        (true, 2, 500, 20_000),
        "a base over the cap is the cap"
    );
    db.finish().await;
}

// ---------------------------------------------------------------------------
// finish, error, adopt_stalled

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_ends_an_operation_once_and_only_for_its_owner() {
    let db = Db::new().await;
    db.job(60_000, 1).await;
    let op = op_create(&db, topic("store-test"), BulkAction::Cancel {}, 5).await;
    let stranger = BulkOp {
        owner_token: 6,
        ..op.clone()
    };
    assert!(!db
        .store
        .bulk_finish(&stranger, BulkStatus::Done, None)
        .await
        .unwrap());
    assert_eq!(
        db.store.bulk_get(op.id).await.unwrap().unwrap().status,
        BulkStatus::Running
    );

    assert!(db
        .store
        .bulk_finish(&op, BulkStatus::Failed, Some("mysql went away"))
        .await
        .unwrap());
    let ended = db.store.bulk_get(op.id).await.unwrap().unwrap();
    assert_eq!(ended.status, BulkStatus::Failed);
    assert_eq!(ended.errors, ["mysql went away"]);
    assert!(ended.finished_at.is_some());
    assert!(
        !db.store
            .bulk_finish(&op, BulkStatus::Done, None)
            .await
            .unwrap(),
        "once"
    );
    assert_eq!(
        db.store.bulk_get(op.id).await.unwrap().unwrap().status,
        BulkStatus::Failed
    );
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_recorded_for_the_owner_and_only_the_last_twenty_kept() {
    let db = Db::new().await;
    db.job(60_000, 1).await;
    let mut op = op_create(&db, topic("store-test"), BulkAction::Cancel {}, 5).await;
    for n in 0..25 {
        db.store
            .bulk_error(&mut op, &format!("error {n}"))
            .await
            .unwrap();
    }
    let stored = db.store.bulk_get(op.id).await.unwrap().unwrap();
    assert_eq!(stored.errors.len(), 20);
    assert_eq!(
        (stored.errors[0].as_str(), stored.errors[19].as_str()),
        ("error 5", "error 24")
    );
    assert_eq!(stored.errors, op.errors, "the caller's copy follows");

    let mut stranger = BulkOp {
        owner_token: 6,
        ..op.clone()
    };
    db.store
        .bulk_error(&mut stranger, "not mine")
        .await
        .unwrap();
    assert_eq!(
        db.store.bulk_get(op.id).await.unwrap().unwrap().errors,
        op.errors
    );
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_running_operation_is_adopted_by_one_new_owner() {
    let db = Db::new().await;
    let job = db.job(60_000, 1).await;
    let stalled = op_create(&db, topic("store-test"), BulkAction::Cancel {}, 5).await;
    let moving = op_create(&db, topic("store-test"), BulkAction::Cancel {}, 6).await;
    let finished = op_create(&db, topic("store-test"), BulkAction::Cancel {}, 7).await;
    assert!(db
        .store
        .bulk_finish(&finished, BulkStatus::Done, None)
        .await
        .unwrap());
    let minute = Duration::from_secs(60);
    assert!(db
        .store
        .bulk_adopt_stalled(minute, 8)
        .await
        .unwrap()
        .is_none());
    for id in [stalled.id, finished.id] {
        db.edit(
            "UPDATE bulk_ops SET updated_at = UTC_TIMESTAMP(3) - INTERVAL 10 MINUTE WHERE id = ?",
            id,
        )
        .await;
    }

    let stalled_at = db
        .store
        .bulk_get(stalled.id)
        .await
        .unwrap()
        .unwrap()
        .updated_at;
    let adopted = db
        .store
        .bulk_adopt_stalled(minute, 8)
        .await
        .unwrap()
        .expect("the stalled one");
    assert_eq!((adopted.id, adopted.owner_token), (stalled.id, 8));
    assert!(adopted.updated_at > stalled_at, "moving again");
    assert!(
        db.store
            .bulk_adopt_stalled(minute, 9)
            .await
            .unwrap()
            .is_none(),
        "adopted, it is moving again"
    );
    assert_eq!(
        db.store
            .bulk_get(moving.id)
            .await
            .unwrap()
            .unwrap()
            .owner_token,
        6
    );
    let batch = [(job, "store-test".to_owned())];
    assert!(
        matches!(
            db.store
                .bulk_apply(&stalled, &batch, no_attempts, any_payload)
                .await,
            Ok(None)
        ),
        "the old owner's batches are refused"
    );
    assert_eq!(db.store.job_get(job).await.unwrap().status, Status::Pending);
    db.finish().await;
}

// ---------------------------------------------------------------------------
// retarget

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retarget_moves_only_what_no_claim_holds_and_a_claim_after_it_reads_the_new_topic() {
    let db = Db::new().await;
    let claimed = keyed(&db, "billing.v1", Some("a"), -1_000).await;
    let free = keyed(&db, "billing.v1", Some("b"), -1_000).await;
    let occurrence = db
        .store
        .job_insert(&NewJob {
            schedule_id: Some(1),
            key: Some("s@2030-01-01T00:00:00.000Z".to_owned()),
            ..job_new("billing.v1", -1_000)
        })
        .await
        .unwrap()
        .0
        .id;
    // A dispatcher holds the first one already.
    let outcome = db
        .store
        .job_claim_many(&[claimed], 7, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(outcome.won.len(), 1);

    let op = op_create(
        &db,
        topic("billing.v1"),
        BulkAction::Retarget {
            topic: "billing.v2".to_owned(),
        },
        1,
    )
    .await;
    let batch = db.store.bulk_next(&op, 10).await.unwrap();
    let applied = runner(&db, &op)
        .bulk_apply(&op, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(applied.changed, [free]);
    assert_eq!((applied.skipped, applied.conflicts), (2, 0));
    let op = db.store.bulk_get(op.id).await.unwrap().unwrap();
    assert_eq!((op.changed, op.skipped, op.conflicts), (1, 2, 0));
    assert_eq!(
        db.store.job_get(claimed).await.unwrap().topic,
        "billing.v1",
        "claimed: it is produced where it was when claimed"
    );
    assert_eq!(
        db.store.job_get(occurrence).await.unwrap().topic,
        "billing.v1",
        "a schedule's occurrence stays with its schedule"
    );
    let moved = db.store.job_get(free).await.unwrap();
    assert_eq!(
        (moved.topic.as_str(), moved.key.as_deref(), moved.version),
        ("billing.v2", Some("b"), 2)
    );
    let last = db.store.job_history(free).await.unwrap().pop().unwrap();
    assert_eq!(last.actor, format!("bulk:{}", op.id));
    assert_eq!(
        last.topics,
        Some(("billing.v1".to_owned(), "billing.v2".to_owned()))
    );

    // The claim reads the row: what it produces goes to the new topic.
    let outcome = db
        .store
        .job_claim_many(&[free], 8, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(outcome.won.len(), 1);
    assert_eq!(outcome.won[0].topic, "billing.v2");
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_of_one_key_retargeted_to_one_topic_move_one_and_leave_the_other() {
    let db = Db::new().await;
    let first = keyed(&db, "orders.eu", Some("same"), 60_000).await;
    let second = keyed(&db, "orders.us", Some("same"), 60_000).await;
    let unkeyed = keyed(&db, "orders.us", None, 60_000).await;
    let filter = BulkFilter {
        ids: Some(vec![first, second, unkeyed]),
        ..BulkFilter::default()
    };
    let action = BulkAction::Retarget {
        topic: "orders".to_owned(),
    };
    let max_id = db.store.job_max_id().await.unwrap();
    assert_eq!(
        db.store
            .bulk_retarget_count(&filter, max_id, "orders")
            .await
            .unwrap(),
        (3, 0),
        "none is taken yet: the preview cannot see two racing for one key"
    );
    let op = op_create(&db, filter, action, 1).await;
    let batch = db.store.bulk_next(&op, 10).await.unwrap();
    let applied = db
        .store
        .bulk_apply(&op, &batch, no_attempts, any_payload)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((applied.changed.len(), applied.conflicts), (2, 1));
    let mut topics = Vec::new();
    for id in [first, second, unkeyed] {
        topics.push(db.store.job_get(id).await.unwrap().topic);
    }
    assert_eq!(
        topics.iter().filter(|t| *t == "orders").count(),
        2,
        "{topics:?}"
    );
    assert_eq!(topics[2], "orders", "no key, no conflict");
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_lets_held_jobs_go_as_one_release_does_and_leaves_the_rest() {
    let db = Db::new().await;
    let fits = db.job(60_000, 1).await;
    let unfit = db.job(60_000, 1).await;
    let single = db.job(60_000, 1).await;
    let free = db.job(60_000, 1).await;
    let cancelled = db.job(60_000, 1).await;
    // Held as the dispatcher holds them; one of them cancelled since.
    sqlx::query(
        "UPDATE jobs SET held_at = UTC_TIMESTAMP(3), held_reason = 'payload_schema: /amount', \
         last_error = 'payload_schema: /amount' WHERE id IN (?, ?, ?, ?)",
    )
    .bind(fits)
    .bind(unfit)
    .bind(single)
    .bind(cancelled)
    .execute(&db.sql)
    .await
    .unwrap();
    db.store.job_cancel(cancelled).await.unwrap();
    let max_id = db.store.job_max_id().await.unwrap();

    // `held` narrows to pending jobs, held or not.
    let held = |held| BulkFilter {
        held: Some(held),
        ..topic("store-test")
    };
    assert_eq!(
        db.store
            .bulk_count(&held(true), max_id, Status::Pending)
            .await
            .unwrap(),
        (3, 3)
    );
    assert_eq!(
        db.store
            .bulk_count(&held(false), max_id, Status::Pending)
            .await
            .unwrap(),
        (1, 1)
    );
    assert_eq!(
        ids(&db.store.bulk_sample(&held(false), 10).await.unwrap()),
        [free]
    );
    assert_eq!(
        db.store
            .bulk_held_count(&topic("store-test"), max_id)
            .await
            .unwrap(),
        3,
        "the cancelled job is not held"
    );
    assert_eq!(
        db.store
            .bulk_held_count(&held(false), max_id)
            .await
            .unwrap(),
        0
    );

    // One job released by hand, the others in bulk: the same row after.
    let version = db.store.job_get(single).await.unwrap().version;
    assert!(matches!(
        db.store
            .job_hold_release(single, version, false)
            .await
            .unwrap(),
        tickler::store::HoldReleased::Applied(..)
    ));
    let filter = BulkFilter {
        ids: Some(vec![fits, unfit, free, cancelled]),
        ..BulkFilter::default()
    };
    let op = op_create(&db, filter.clone(), BulkAction::Release { force: false }, 1).await;
    let batch = db.store.bulk_next(&op, 10).await.unwrap();
    let applied = runner(&db, &op)
        .bulk_apply(&op, &batch, no_attempts, |job: &Job| job.id != unfit)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (applied.changed.clone(), applied.conflicts, applied.skipped),
        (vec![fits], 1, 2),
        "the unfit one stays held, the free and cancelled ones are skipped"
    );
    let by_hand = db.store.job_get(single).await.unwrap();
    let released = db.store.job_get(fits).await.unwrap();
    for job in [&by_hand, &released] {
        assert_eq!(
            (
                job.status,
                job.held_at,
                job.held_reason.as_deref(),
                job.schema_waived_attempt,
                job.version
            ),
            (Status::Pending, None, None, None, 2),
            "job {}",
            job.id
        );
    }
    assert_eq!(released.last_error, by_hand.last_error);
    let last = db.store.job_history(fits).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.actor.as_str(), last.status, last.attempt),
        (format!("bulk:{}", op.id).as_str(), Status::Pending, 1)
    );
    let still = db.store.job_get(unfit).await.unwrap();
    assert!(still.held_at.is_some() && still.version == 1, "{still:?}");
    assert_eq!(
        db.store.job_get(free).await.unwrap().version,
        1,
        "not held: left alone"
    );

    // Forced: nothing is checked, and the attempt is waived.
    let op = op_create(&db, filter, BulkAction::Release { force: true }, 2).await;
    let batch = db.store.bulk_next(&op, 10).await.unwrap();
    let applied = runner(&db, &op)
        .bulk_apply(&op, &batch, no_attempts, |_: &Job| -> bool {
            panic!("a forced release checks no payload")
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (applied.changed.clone(), applied.conflicts, applied.skipped),
        (vec![unfit], 0, 3)
    );
    let forced = db.store.job_get(unfit).await.unwrap();
    assert_eq!(
        (forced.held_at, forced.schema_waived_attempt, forced.version),
        (None, Some(forced.attempt), 2)
    );
    db.finish().await;
}
