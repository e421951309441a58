//! The jobs service (src/roles/jobs.rs), against a real database and a
//! real Redis: each write is decided in MySQL, and Redis follows — a job
//! due within the window is indexed at once, one beyond it is not, a
//! cancelled one leaves, a moved one moves. And when Redis cannot follow,
//! the write still stands (MySQL is the truth; the loader and reconciler
//! repair the index).

use std::sync::Arc;
use std::time::Duration;

use tickler::domain::job::{NewJob, Schedule, Status};
use tickler::index::{Index, Location, RedisClient};
use tickler::roles::jobs::Jobs;
use tickler::store::{BatchRow, Cancelled, JobChanges, Modified, Redriven};
use tickler_testkit::store::{job_new, Db, SHARDS};
use tickler_testkit::{redis_url, unique};

const WINDOW: Duration = Duration::from_secs(600);

async fn service(db: &Db) -> (Jobs, Index) {
    let index = Index::connect(&redis_url(), &unique("tickler-jobs-"), SHARDS)
        .await
        .expect("redis is running (scripts/services)");
    let wake = Arc::new(tokio::sync::Notify::new());
    (
        Jobs::new(db.store.clone(), index.clone(), WINDOW, wake),
        index,
    )
}

fn keyed(topic: &str, key: &str, in_ms: i64) -> NewJob {
    NewJob {
        key: Some(key.to_owned()),
        ..job_new(topic, in_ms)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_job_is_indexed_when_due_within_the_window_and_only_then() {
    let db = Db::new().await;
    let (jobs, index) = service(&db).await;
    let near = keyed("svc", "near", 5_000);
    let far = keyed("svc", "far", 3_600_000);
    let rows = jobs.create_many(&[&near, &far], None).await.unwrap();
    let ids: Vec<u64> = rows
        .iter()
        .map(|row| row.created().expect("created").id)
        .collect();
    assert!(matches!(
        index.job_locate(ids[0]).await.unwrap(),
        Some(Location::Due(_))
    ));
    assert_eq!(
        index.job_locate(ids[1]).await.unwrap(),
        None,
        "beyond the window"
    );

    // The same (topic, key) again: a duplicate, written nowhere.
    let again = jobs.create_many(&[&near], None).await.unwrap();
    assert!(matches!(again.as_slice(), [BatchRow::Duplicate]));
    assert_eq!(jobs.create(&far).await.unwrap(), None);
    let found = jobs
        .find("svc", "far")
        .await
        .unwrap()
        .expect("found by key");
    assert_eq!(found.id, ids[1]);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_and_a_cancel_make_redis_follow() {
    let db = Db::new().await;
    let (jobs, index) = service(&db).await;
    let job = jobs
        .create(&keyed("svc", "moved", 3_600_000))
        .await
        .unwrap()
        .expect("created");
    assert_eq!(index.job_locate(job.id).await.unwrap(), None);
    // Moved into the window: indexed at its new time.
    let soon = chrono::Utc::now() + chrono::Duration::seconds(30);
    let changes = JobChanges {
        schedule: Some(Schedule::At(soon)),
        ..JobChanges::default()
    };
    let Modified::Applied(moved, _) = jobs
        .modify(job.id, job.version, &changes, None)
        .await
        .unwrap()
    else {
        panic!("a pending job at its version moves")
    };
    assert_eq!(
        index.job_locate(job.id).await.unwrap(),
        Some(Location::Due(moved.schedule_time.timestamp_millis()))
    );
    // A stale version changes nothing, and Redis stays as it was.
    let stale = jobs
        .modify(job.id, job.version, &changes, None)
        .await
        .unwrap();
    assert!(matches!(stale, Modified::VersionMismatch(_)));
    // Cancelled: out of Redis, for good.
    let Cancelled::Applied(cancelled) = jobs.cancel(job.id).await.unwrap() else {
        panic!("a pending job is cancelled")
    };
    assert_eq!(cancelled.status, Status::Cancelled);
    assert_eq!(index.job_locate(job.id).await.unwrap(), None);
    assert!(matches!(
        jobs.cancel(job.id).await.unwrap(),
        Cancelled::Already(_)
    ));
    // Only a dead job is redriven.
    assert!(matches!(
        jobs.redrive(job.id, 3, None).await.unwrap(),
        Redriven::NotDead(_)
    ));
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_gone_the_write_stands_in_mysql() {
    let db = Db::new().await;
    // Nothing listens here: every Redis call fails.
    let index = Index::connect_with(
        RedisClient::Single(redis::Client::open("redis://127.0.0.1:1/").unwrap()),
        &unique("tickler-jobs-"),
        SHARDS,
    )
    .unwrap();
    let jobs = Jobs::new(
        db.store.clone(),
        index,
        WINDOW,
        Arc::new(tokio::sync::Notify::new()),
    );
    let job = tokio::time::timeout(
        Duration::from_secs(30),
        jobs.create(&keyed("svc", "no-redis", 1_000)),
    )
    .await
    .expect("a create does not wait for Redis without bound")
    .unwrap()
    .expect("created");
    let row = db.store.job_get(job.id).await.unwrap();
    assert_eq!(
        row.status,
        Status::Pending,
        "in MySQL, for the loader to index"
    );
    let cancelled = tokio::time::timeout(Duration::from_secs(30), jobs.cancel(job.id))
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(cancelled, Cancelled::Applied(_)));
    db.finish().await;
}
