//! The store's compare-and-sets, method by method, against a real database
//! (no Redis, no broker): what each answers for every state a row can be in.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{Duration as Span, Utc};
use tickler::job::{JobId, NewJob, PayloadKind, Schedule, Status};
use tickler::outcome::Policy;
use tickler::store::{Actor, Cancelled, Dispatched, Store};
use tickler_testkit::{database_create, database_drop};

struct Db {
    name: String,
    store: Store,
}

impl Db {
    async fn new() -> Db {
        let (name, url) = database_create().await;
        let store = Store::connect_lazy(&url, 4, Actor::Dispatcher).unwrap();
        Db { name, store }
    }

    /// A job due `in_ms` from now (negative: overdue) with `max_attempts`.
    async fn job(&self, in_ms: i64, max_attempts: u32) -> JobId {
        let job = NewJob {
            topic: "store-test".to_owned(),
            key: None,
            payload: b"{}".to_vec(),
            payload_kind: PayloadKind::Json,
            headers: BTreeMap::new(),
            schedule: Schedule::At(Utc::now() + Span::milliseconds(in_ms)),
            policy: Policy {
                max_attempts,
                ..Policy::default()
            },
        };
        self.store.job_insert(&job).await.unwrap().0.id
    }

    async fn finish(self) {
        self.store.close().await;
        database_drop(&self.name).await;
    }
}

const LEASE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_wins_due_pending_jobs_and_sorts_out_the_rest() {
    let db = Db::new().await;
    let due = db.job(-1_000, 5).await;
    let later = db.job(3_600_000, 5).await;
    let cancelled = db.job(-1_000, 5).await;
    assert!(matches!(
        db.store.job_cancel(cancelled).await.unwrap(),
        Cancelled::Applied(_)
    ));
    let outcome = db
        .store
        .job_claim_many(&[due, later, cancelled, 999_999], 7, LEASE)
        .await
        .unwrap();
    let won: Vec<JobId> = outcome.won.iter().map(|j| j.id).collect();
    assert_eq!(won, [due]);
    assert_eq!(outcome.won[0].status, Status::Dispatching);
    let not_due: Vec<JobId> = outcome.not_due.iter().map(|e| e.id).collect();
    assert_eq!(
        not_due,
        [later],
        "pending but not due by the database's clock"
    );
    let mut stale = outcome.stale.clone();
    stale.sort_unstable();
    assert_eq!(stale, [cancelled, 999_999], "not pending, or gone");
    assert!(outcome.db_now.is_some());

    let again = db.store.job_claim_many(&[due], 8, LEASE).await.unwrap();
    assert!(again.won.is_empty(), "a claimed job is not won twice");
    assert_eq!(again.stale, [due]);
    db.finish().await;
}

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
        .job_claim_many(&[in_flight, produced], 1, LEASE)
        .await
        .unwrap();
    assert_eq!(claim.won.len(), 2);
    assert!(matches!(
        db.store.job_cancel(in_flight).await.unwrap(),
        Cancelled::InFlight(_)
    ));
    let marked = db
        .store
        .job_mark_dispatched_many(
            1,
            &[Dispatched {
                id: produced,
                partition: 3,
                offset: 42,
                dispatched_at: Utc::now(),
            }],
        )
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_send_counts_an_attempt_only_under_its_own_claim() {
    let db = Db::new().await;
    let retried = db.job(-1, 2).await;
    let buried = db.job(-1, 1).await;
    db.store
        .job_claim_many(&[retried, buried], 5, LEASE)
        .await
        .unwrap();
    let never = |_: &str| false;
    let refusals = vec![
        (retried, "no such topic".to_owned()),
        (buried, "no such topic".to_owned()),
    ];
    let other = db
        .store
        .job_refuse_many(6, &refusals, &never)
        .await
        .unwrap();
    assert_eq!(
        (other.retried.len(), other.dead),
        (0, 0),
        "another claim's refusal changes nothing"
    );
    assert_eq!(
        db.store.job_get(retried).await.unwrap().status,
        Status::Dispatching
    );

    let settled = db
        .store
        .job_refuse_many(5, &refusals, &never)
        .await
        .unwrap();
    assert_eq!((settled.retried.len(), settled.dead), (1, 1));
    let job = db.store.job_get(retried).await.unwrap();
    assert_eq!((job.status, job.attempt), (Status::Pending, 2));
    assert!(job.last_error.unwrap().contains("no such topic"));
    let now = settled.db_now.unwrap();
    assert!(job.schedule_time > now, "after its backoff");
    let job = db.store.job_get(buried).await.unwrap();
    assert_eq!((job.status, job.attempt), (Status::Dead, 1));
    assert!(job
        .last_error
        .unwrap()
        .starts_with("attempts exhausted (1 of 1)"));
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_only_finished_jobs_past_retention() {
    let db = Db::new().await;
    let finished = db.job(3_600_000, 5).await;
    let waiting = db.job(3_600_000, 5).await;
    db.store.job_cancel(finished).await.unwrap();
    assert_eq!(
        db.store
            .job_purge_finished(Duration::from_secs(3600), 100)
            .await
            .unwrap(),
        0,
        "finished, but within retention"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        db.store
            .job_purge_finished(Duration::from_millis(10), 100)
            .await
            .unwrap(),
        1
    );
    assert!(db.store.job_get(finished).await.is_err(), "purged");
    assert_eq!(
        db.store.job_get(waiting).await.unwrap().status,
        Status::Pending
    );
    db.finish().await;
}
