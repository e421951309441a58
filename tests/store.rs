//! The store's compare-and-sets, method by method, against a real database
//! (no Redis, no broker): what each answers for every state a row can be in.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{Duration as Span, Utc};
use tickler::job::{JobId, NewJob, PayloadKind, Schedule, Status};
use tickler::policy::Policy;
use tickler::store::{Actor, Cancelled, Dispatched, Fence, Store};
use tickler_testkit::{database_create, database_drop, fence_all};

struct Db {
    name: String,
    store: Store,
    /// For hand edits.
    sql: sqlx::MySqlPool,
    /// An instance holding every shard: the claims' fence.
    fence: Fence,
}

impl Db {
    async fn new() -> Db {
        let (name, url) = database_create().await;
        let store = Store::connect_lazy(&url, 4, Actor::Dispatcher).unwrap();
        let fence = fence_all(&store, 4).await;
        let sql = sqlx::MySqlPool::connect(&url).await.unwrap();
        Db {
            name,
            store,
            sql,
            fence,
        }
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
            trace_parent: None,
            schedule_id: None,
            expires_at: None,
        };
        self.store.job_insert(&job).await.unwrap().0.id
    }

    async fn finish(self) {
        self.sql.close().await;
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
        .job_claim_many(&[due, later, cancelled, 999_999], 7, LEASE, &db.fence)
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

    let again = db
        .store
        .job_claim_many(&[due], 8, LEASE, &db.fence)
        .await
        .unwrap();
    assert!(again.won.is_empty(), "a claimed job is not won twice");
    assert_eq!(again.stale, [due]);
    db.finish().await;
}

/// With a lookahead, the claim takes jobs due within it by the database's
/// clock and nothing later; one mark records several claims at once, each
/// row only under its own claim's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_ahead_takes_only_the_lookahead_and_one_mark_records_several_claims() {
    let db = Db::new().await;
    let soon = db.job(400, 5).await;
    let later = db.job(5_000, 5).await;
    let outcome = db
        .store
        .job_claim_many_with(
            &[soon, later],
            11,
            LEASE,
            &db.fence,
            false,
            Duration::from_secs(2),
        )
        .await
        .unwrap();
    let won: Vec<JobId> = outcome.won.iter().map(|j| j.id).collect();
    assert_eq!(won, [soon], "due within the lookahead");
    let db_now = outcome.db_now.unwrap();
    assert!(
        outcome.won[0].schedule_time > db_now,
        "won ahead of its time: the dispatcher holds it"
    );
    let not_due: Vec<JobId> = outcome.not_due.iter().map(|e| e.id).collect();
    assert_eq!(not_due, [later]);
    let none = db
        .store
        .job_claim_many_with(&[later], 12, LEASE, &db.fence, false, Duration::ZERO)
        .await
        .unwrap();
    assert!(none.won.is_empty(), "no lookahead: only what is due");

    let other = db.job(-1, 5).await;
    let outcome = db
        .store
        .job_claim_many(&[other], 12, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(outcome.won.len(), 1);
    let at = Utc::now();
    let mark = |id, token, offset| Dispatched {
        id,
        token,
        partition: 0,
        offset,
        dispatched_at: at,
    };
    // `other` under a token it was not claimed with is left alone.
    let marked = db
        .store
        .job_mark_dispatched_many(&[mark(soon, 11, 1), mark(other, 11, 2)])
        .await
        .unwrap();
    assert_eq!(marked.marked, 1);
    assert_eq!(
        db.store.job_get(other).await.unwrap().status,
        Status::Dispatching
    );
    let marked = db
        .store
        .job_mark_dispatched_many(&[mark(other, 12, 3)])
        .await
        .unwrap();
    assert_eq!(marked.marked, 1);
    for (id, offset) in [(soon, 1), (other, 3)] {
        let job = db.store.job_get(id).await.unwrap();
        assert_eq!(
            (job.status, job.kafka_offset),
            (Status::Dispatched, Some(offset))
        );
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_send_counts_an_attempt_only_under_its_own_claim() {
    let db = Db::new().await;
    let retried = db.job(-1, 2).await;
    let buried = db.job(-1, 1).await;
    db.store
        .job_claim_many(&[retried, buried], 5, LEASE, &db.fence)
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

/// A paused instance that lost its shard wakes with a fence at the old
/// epoch: its compare-and-set wins nothing, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_under_a_lost_lease_or_by_a_dead_instance_wins_nothing() {
    let db = Db::new().await;
    let due = db.job(-1_000, 5).await;
    // Another instance takes shard 0 over (epoch + 1).
    let other = db
        .store
        .instance_register(&tickler::store::InstanceInfo {
            host: "other".to_owned(),
            pid: 1,
            pid_namespace: None,
            version: "test".to_owned(),
            roles: "dispatcher".to_owned(),
        })
        .await
        .unwrap();
    let (shard, epoch) = db.fence.leases[0];
    let taken = db.store.shard_acquire(shard, epoch, other).await.unwrap();
    assert_eq!(taken, Some(epoch + 1));
    let stale = Fence {
        leases: vec![(shard, epoch)],
        ..db.fence.clone()
    };
    let outcome = db
        .store
        .job_claim_many(&[due], 7, LEASE, &stale)
        .await
        .unwrap();
    assert!(outcome.won.is_empty(), "the old epoch wins nothing");
    assert_eq!(outcome.fenced, [due], "and says it was fenced off");
    let current = Fence {
        instance: other,
        leases: vec![(shard, epoch + 1)],
        ..db.fence.clone()
    };
    // The new owner's heartbeat goes silent past its TTL: dead for
    // everyone, its claims too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let short = Fence {
        ttl: Duration::from_millis(200),
        ..current.clone()
    };
    let outcome = db
        .store
        .job_claim_many(&[due], 8, LEASE, &short)
        .await
        .unwrap();
    assert_eq!(outcome.fenced, [due], "a dead instance wins nothing");
    let outcome = db
        .store
        .job_claim_many(&[due], 9, LEASE, &current)
        .await
        .unwrap();
    assert_eq!(outcome.won.len(), 1, "the live owner at the new epoch wins");
    db.finish().await;
}

/// The claims of an instance silent past its TTL are put in doubt at once
/// (it may have handed their records to the broker, or may still if it is
/// only paused): they stay `dispatching`, so a cancel cannot answer
/// `cancelled`, until the reconciler has read their topic back after the
/// quiet time. A live instance's claims stay as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_a_dead_instance_are_put_in_doubt_and_a_live_ones_are_not() {
    let db = Db::new().await;
    let held = db.job(-1_000, 5).await;
    let claim = db
        .store
        .job_claim_many(&[held], 7, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(claim.won.len(), 1);
    let ttl = Duration::from_millis(500);
    let quiet = Duration::from_millis(300);
    assert_eq!(
        db.store.job_rescue_dead(ttl, quiet, 100).await.unwrap(),
        0,
        "the instance beat its heart a moment ago"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(db.store.job_rescue_dead(ttl, quiet, 100).await.unwrap(), 1);
    let job = db.store.job_get(held).await.unwrap();
    assert_eq!(
        (job.status, job.attempt),
        (Status::Dispatching, 1),
        "in doubt: still dispatching, same attempt"
    );
    assert!(job.last_error.unwrap().contains("which died"));
    assert!(
        matches!(
            db.store.job_cancel(held).await.unwrap(),
            Cancelled::InFlight(_)
        ),
        "a cancel cannot say cancelled while the record may be on the broker"
    );
    assert!(
        db.store.job_doubts_due(100).await.unwrap().is_empty(),
        "not read back before the quiet time"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let doubts = db.store.job_doubts_due(100).await.unwrap();
    assert_eq!(doubts.len(), 1);
    assert_eq!(
        (doubts[0].id, doubts[0].attempt, doubts[0].token),
        (held, 1, Some(7))
    );
    assert!(doubts[0].since <= Utc::now());
    // Not found on Kafka: back to pending, once.
    let moved = db.store.job_doubt_absent(&doubts).await.unwrap();
    assert_eq!(moved.iter().map(|e| e.id).collect::<Vec<_>>(), [held]);
    assert!(db.store.job_doubt_absent(&doubts).await.unwrap().is_empty());
    assert_eq!(
        db.store.job_get(held).await.unwrap().status,
        Status::Pending
    );
    // The dead instance's late mark finds nothing to mark.
    let marked = db
        .store
        .job_mark_dispatched_many(&[Dispatched {
            id: held,
            token: 7,
            partition: 0,
            offset: 1,
            dispatched_at: Utc::now(),
        }])
        .await
        .unwrap();
    assert_eq!(marked.marked, 0);
    db.finish().await;
}

/// A claim in doubt keeps its token: the claimer's late acknowledgement
/// still marks it, with the position the broker gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_doubt_is_still_marked_by_its_own_late_acknowledgement() {
    let db = Db::new().await;
    let id = db.job(-1_000, 1).await;
    db.store
        .job_claim_many(&[id], 11, LEASE, &db.fence)
        .await
        .unwrap();
    let doubted = db
        .store
        .job_doubt_many(
            11,
            &[id],
            "not acknowledged (timed out)",
            Duration::from_secs(2),
        )
        .await
        .unwrap();
    assert_eq!(doubted, 1);
    assert!(
        db.store
            .job_doubt_many(12, &[id], "x", Duration::ZERO)
            .await
            .unwrap()
            == 0,
        "another claim's token changes nothing"
    );
    let marked = db
        .store
        .job_mark_dispatched_many(&[Dispatched {
            id,
            token: 11,
            partition: 0,
            offset: 41,
            dispatched_at: Utc::now(),
        }])
        .await
        .unwrap();
    assert_eq!(marked.marked, 1);
    let job = db.store.job_get(id).await.unwrap();
    assert_eq!(
        (job.status, job.kafka_offset),
        (Status::Dispatched, Some(41))
    );
    db.finish().await;
}

/// A row the claim wins but cannot decode (a hand edit the column accepts)
/// is set aside as dead, with why, in the claim itself; the jobs claimed
/// beside it are won as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_row_is_set_aside_and_never_holds_up_the_others() {
    let db = Db::new().await;
    let good = db.job(-1_000, 1).await;
    let bad = db.job(-1_000, 1).await;
    let also_good = db.job(-1_000, 1).await;
    sqlx::query("UPDATE jobs SET headers = '7' WHERE id = ?")
        .bind(bad)
        .execute(&db.sql)
        .await
        .unwrap();
    let outcome = db
        .store
        .job_claim_many(&[good, bad, also_good], 5, LEASE, &db.fence)
        .await
        .unwrap();
    let mut won: Vec<JobId> = outcome.won.iter().map(|j| j.id).collect();
    won.sort_unstable();
    assert_eq!(won, [good, also_good]);
    assert_eq!(
        outcome
            .unreadable
            .iter()
            .map(|(id, _)| *id)
            .collect::<Vec<_>>(),
        [bad]
    );
    let (status, error): (String, String) = sqlx::query_as(
        "SELECT CAST(status AS CHAR), CAST(last_error AS CHAR) FROM jobs WHERE id = ?",
    )
    .bind(bad)
    .fetch_one(&db.sql)
    .await
    .unwrap();
    assert_eq!(status, "dead");
    assert!(error.starts_with("unreadable row: "), "{error}");
    let (count, ids) = db.store.job_unreadable(10).await.unwrap();
    assert_eq!((count, ids), (1, vec![bad]));
    db.finish().await;
}
