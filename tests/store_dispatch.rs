//! The store's dispatch path on `jobs` (src/store/dispatch.rs), method by
//! method, against a real database (no Redis, no broker): the claim, the
//! mark, claims in doubt, expiry and release, and the reads that feed the
//! window — what each answers for every state a row can be in, what it
//! leaves in the row and in `job_events`, and what it leaves alone.

use std::time::Duration;

use chrono::{DateTime, Duration as Span, Utc};
use tickler::domain::job::{Job, JobId, NewJob, Schedule, Status};
use tickler::domain::outcome::{Outcome, ResultReport};
use tickler::domain::policy::Policy;
use tickler::store::{
    BatchRow, Cancelled, ClaimOutcome, Dispatched, JobChanges, Modified, TopicChange, WindowEntry,
};
use tickler_testkit::store::{job_new, Db, LEASE};

fn won(outcome: &ClaimOutcome) -> Vec<JobId> {
    outcome.won.iter().map(|j| j.id).collect()
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

fn mark(id: JobId, token: u64, offset: i64) -> Dispatched {
    Dispatched {
        id,
        token,
        partition: 0,
        offset,
        dispatched_at: Utc::now(),
        schedule_time: Utc::now(),
        attempt: 1,
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

async fn status(db: &Db, id: JobId) -> Status {
    db.store.job_get(id).await.unwrap().status
}

// ---------------------------------------------------------------------------
// claim_many, claim_many_with

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
    // Due well after the claim even on a loaded machine (400 ms was once
    // not enough under the whole suite), and within the lookahead.
    let soon = db.job(2_000, 5).await;
    let later = db.job(10_000, 5).await;
    let outcome = db
        .store
        .job_claim_many_with(
            &[soon, later],
            11,
            LEASE,
            &db.fence,
            false,
            Duration::from_secs(4),
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
        schedule_time: Utc::now(),
        attempt: 1,
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

/// Jobs of a paused topic and first attempts past their expiry are named,
/// not won; a retry past the expiry is won (it runs late), and the claim
/// writes no history (it lasts milliseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_names_paused_and_expired_jobs_and_records_no_history() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let plain = db.job(-1_000, 5).await;
    let held = db
        .store
        .job_insert(&job_new("held", -1_000))
        .await
        .unwrap()
        .0
        .id;
    let expiring = |topic| NewJob {
        expires_at: Some(now - Span::milliseconds(500)),
        ..job_new(topic, -1_000)
    };
    let (rows, _) = db
        .store
        .job_insert_many(&[expiring("store-test"), expiring("store-test")])
        .await
        .unwrap();
    let (expired, retried) = (created(&rows[0]).id, created(&rows[1]).id);
    db.edit("UPDATE jobs SET attempt = 2 WHERE id = ?", retried)
        .await;
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

    let outcome = db
        .store
        .job_claim_many(&[plain, held, expired, retried], 3, LEASE, &db.fence)
        .await
        .unwrap();
    let mut got = won(&outcome);
    got.sort_unstable();
    assert_eq!(got, [plain, retried]);
    assert_eq!(outcome.paused, [held]);
    assert_eq!(outcome.expired, [expired]);
    assert!(outcome.stale.is_empty() && outcome.not_due.is_empty() && outcome.fenced.is_empty());
    assert_eq!(
        (status(&db, held).await, status(&db, expired).await),
        (Status::Pending, Status::Pending)
    );

    let job = db.store.job_get(plain).await.unwrap();
    assert_eq!(
        (job.status, job.attempt, job.version),
        (Status::Dispatching, 1, 2),
        "a claim is a new version, not a new attempt"
    );
    assert_eq!(db.store.job_history(plain).await.unwrap().len(), 1);

    // Without the pause check (the dispatcher's copy of the controls names
    // no paused topic) the topic's job is won.
    let unchecked = db
        .store
        .job_claim_many_with(&[held], 4, LEASE, &db.fence, false, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(won(&unchecked), [held]);

    let nothing = db
        .store
        .job_claim_many(&[], 5, LEASE, &db.fence)
        .await
        .unwrap();
    assert!(nothing.won.is_empty() && nothing.stale.is_empty() && nothing.db_now.is_none());
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

// ---------------------------------------------------------------------------
// mark_dispatched_many

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mark_records_the_position_and_arms_the_ack_deadline_of_jobs_expecting_a_result() {
    let db = Db::new().await;
    let expecting = db
        .store
        .job_insert(&NewJob {
            policy: Policy {
                expects_result: true,
                ack_timeout_ms: 60_000,
                ..Policy::default()
            },
            ..job_new("store-test", -1_000)
        })
        .await
        .unwrap()
        .0
        .id;
    let fire_and_forget = db.job(-1_000, 5).await;
    db.store
        .job_claim_many(&[expecting, fire_and_forget], 3, LEASE, &db.fence)
        .await
        .unwrap();
    let before = db.store.db_now().await.unwrap();
    let sent_at = before - Span::milliseconds(20);
    let position = |id, offset| Dispatched {
        id,
        token: 3,
        partition: 2,
        offset,
        dispatched_at: sent_at,
        schedule_time: Utc::now(),
        attempt: 1,
    };
    let marked = db
        .store
        .job_mark_dispatched_many(&[position(expecting, 10), position(fire_and_forget, 11)])
        .await
        .unwrap();
    assert_eq!((marked.marked, marked.retried_early.len()), (2, 0));
    let after = db.store.db_now().await.unwrap();

    let job = db.store.job_get(expecting).await.unwrap();
    assert_eq!(
        (
            job.status,
            job.kafka_partition,
            job.kafka_offset,
            job.dispatched_at,
            job.attempt,
            job.version
        ),
        (Status::Dispatched, Some(2), Some(10), Some(sent_at), 1, 3)
    );
    let deadline = job.ack_deadline.expect("a deadline for its result");
    assert!(deadline >= before + Span::seconds(60) && deadline <= after + Span::seconds(60));
    let other = db.store.job_get(fire_and_forget).await.unwrap();
    assert_eq!(
        (other.status, other.kafka_offset, other.ack_deadline),
        (Status::Dispatched, Some(11), None)
    );
    let last = db
        .store
        .job_history(expecting)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        (last.actor.as_str(), last.status),
        ("dispatcher", Status::Dispatched)
    );

    let again = db
        .store
        .job_mark_dispatched_many(&[position(expecting, 99)])
        .await
        .unwrap();
    assert_eq!(again.marked, 0, "a claim is marked once");
    assert_eq!(
        db.store.job_get(expecting).await.unwrap().kafka_offset,
        Some(10)
    );
    assert_eq!(
        db.store.job_mark_dispatched_many(&[]).await.unwrap().marked,
        0
    );
    db.finish().await;
}

/// A pass's mark records each row's own position whatever shape the
/// positions take: runs of consecutive offsets in several partitions (one
/// single-table UPDATE), a partition shared with another producer (runs
/// broken by gaps), and offsets too scattered for runs (the joined form).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_records_every_rows_own_position_in_runs_gaps_and_scatter() {
    let db = Db::new().await;
    let mut ids = Vec::new();
    for _ in 0..120 {
        ids.push(db.job(-1_000, 1).await);
    }
    let claim = db
        .store
        .job_claim_many(&ids, 9, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(claim.won.len(), 120);
    let sent_at = db.store.db_now().await.unwrap();
    let at = |id, partition, offset| Dispatched {
        id,
        token: 9,
        partition,
        offset,
        dispatched_at: sent_at,
        schedule_time: Utc::now(),
        attempt: 1,
    };
    // 0..60: three partitions, ids not in offset order, one gap in
    // partition 1 (another producer's record at 1_020).
    let mut expected = Vec::new();
    for (n, id) in ids[..60].iter().enumerate() {
        let partition = (n % 3) as i32;
        let mut offset = 1_000 + (59 - n as i64) / 3;
        if partition == 1 && offset >= 1_010 {
            offset += 10;
        }
        expected.push(at(*id, partition, offset));
    }
    // 60..120: every other offset of one partition (too many runs).
    for (n, id) in ids[60..].iter().enumerate() {
        expected.push(at(*id, 5, 7_000 + 2 * n as i64));
    }
    for chunk in [&expected[..60], &expected[60..]] {
        let marked = db.store.job_mark_dispatched_many(chunk).await.unwrap();
        assert_eq!(marked.marked, chunk.len() as u64);
    }
    for sent in &expected {
        let job = db.store.job_get(sent.id).await.unwrap();
        assert_eq!(
            (
                job.status,
                job.kafka_partition,
                job.kafka_offset,
                job.dispatched_at
            ),
            (
                Status::Dispatched,
                Some(sent.partition),
                Some(sent.offset),
                Some(sent_at)
            ),
            "job {}",
            sent.id
        );
    }
    db.finish().await;
}

/// A consumer can answer before the dispatcher marks: the mark then records
/// where the record landed and leaves the report's status; a job the report
/// sent back to pending is named, so its index entry at the retry time
/// stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_after_the_report_records_the_position_and_names_the_retried() {
    let db = Db::new().await;
    let expecting = || NewJob {
        policy: Policy {
            expects_result: true,
            max_attempts: 3,
            ..Policy::default()
        },
        ..job_new("store-test", -1_000)
    };
    let retried = db.store.job_insert(&expecting()).await.unwrap().0.id;
    let succeeded = db.store.job_insert(&expecting()).await.unwrap().0.id;
    db.store
        .job_claim_many(&[retried, succeeded], 4, LEASE, &db.fence)
        .await
        .unwrap();
    let report = |job_id, outcome| ResultReport {
        job_id,
        attempt: 1,
        outcome,
        error: None,
        retry_after_ms: Some(60_000),
    };
    let settled = db
        .store
        .job_report_many(
            &[
                report(retried, Outcome::Retry),
                ResultReport {
                    retry_after_ms: None,
                    ..report(succeeded, Outcome::Ok)
                },
            ],
            &|_| false,
        )
        .await
        .unwrap();
    assert_eq!((settled.retried.len(), settled.succeeded), (1, 1));

    let marked = db
        .store
        .job_mark_dispatched_many(&[mark(retried, 4, 20), mark(succeeded, 4, 21)])
        .await
        .unwrap();
    assert_eq!(marked.marked, 2);
    assert_eq!(marked.retried_early, [retried]);
    let job = db.store.job_get(retried).await.unwrap();
    assert_eq!(
        (job.status, job.attempt, job.kafka_offset),
        (Status::Pending, 2, Some(20))
    );
    assert!(job.dispatched_at.is_some());
    let job = db.store.job_get(succeeded).await.unwrap();
    assert_eq!(
        (job.status, job.kafka_offset),
        (Status::Succeeded, Some(21))
    );
    db.finish().await;
}

// ---------------------------------------------------------------------------
// doubt_many, doubts_due, doubt_absent

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
            schedule_time: Utc::now(),
            attempt: 1,
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

/// A claim put in doubt stays `dispatching` (a cancel answers in flight)
/// with why, and is read back only once its quiet time has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_doubt_waits_out_its_quiet_time_before_it_is_read_back() {
    let db = Db::new().await;
    let quiet = db.job(-1_000, 5).await;
    let loud = db.job(-1_000, 5).await;
    db.store
        .job_claim_many(&[quiet, loud], 6, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(
        db.store
            .job_doubt_many(6, &[quiet], "send timed out", Duration::from_secs(3_600))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        db.store
            .job_doubt_many(6, &[loud], "send timed out", Duration::ZERO)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        db.store
            .job_doubt_many(6, &[], "x", Duration::ZERO)
            .await
            .unwrap(),
        0
    );
    let job = db.store.job_get(quiet).await.unwrap();
    assert_eq!(
        (job.status, job.attempt, job.last_error.as_deref()),
        (Status::Dispatching, 1, Some("send timed out"))
    );
    assert!(matches!(
        db.store.job_cancel(quiet).await.unwrap(),
        Cancelled::InFlight(_)
    ));
    // A quiet time of zero ends at the database's next millisecond.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let due = db.store.job_doubts_due(100).await.unwrap();
    assert_eq!(due.iter().map(|d| d.id).collect::<Vec<_>>(), [loud]);
    assert_eq!(due[0].token, Some(6));
    db.finish().await;
}

/// Claims whose lease expired, and rows set `dispatching` by hand, are due
/// to be read back; one found absent goes back to pending at the same
/// attempt, once, and only while it is still that claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doubts_due_lists_lapsed_claims_and_absent_sends_each_back_once() {
    let db = Db::new().await;
    let lapsed = db.job(-60_000, 5).await;
    let held = db.job(-60_000, 5).await;
    let by_hand = db.job(-60_000, 5).await;
    db.store
        .job_claim_many(&[lapsed, held], 5, LEASE, &db.fence)
        .await
        .unwrap();
    db.edit(
        "UPDATE jobs SET claim_expires_at = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE id = ?",
        lapsed,
    )
    .await;
    db.edit(
        "UPDATE jobs SET status = 'dispatching' WHERE id = ?",
        by_hand,
    )
    .await;

    let mut doubts = db.store.job_doubts_due(100).await.unwrap();
    doubts.sort_by_key(|d| d.id);
    assert_eq!(
        doubts.iter().map(|d| d.id).collect::<Vec<_>>(),
        [lapsed, by_hand]
    );
    let lapsed_job = db.store.job_get(lapsed).await.unwrap();
    assert_eq!(
        (doubts[0].token, doubts[0].attempt, doubts[0].topic.as_str()),
        (Some(5), 1, "store-test")
    );
    assert!(
        doubts[0].since >= lapsed_job.schedule_time,
        "no record of the claim is older than the claim"
    );
    assert_eq!(doubts[0].schedule_time, lapsed_job.schedule_time);
    assert_eq!(
        (doubts[1].token, doubts[1].since),
        (None, doubts[1].schedule_time),
        "a hand-made claim is read back from its schedule time"
    );
    assert_eq!(db.store.job_doubts_due(1).await.unwrap().len(), 1);

    // A doubt about a claim that is no longer the row's changes nothing.
    let mut stale = doubts[0].clone();
    stale.token = Some(99);
    assert!(db
        .store
        .job_doubt_absent(&[stale])
        .await
        .unwrap()
        .is_empty());

    let moved = db.store.job_doubt_absent(&doubts).await.unwrap();
    assert_eq!(entry_ids(&moved), [lapsed, by_hand]);
    assert_eq!(moved[0].schedule_time, lapsed_job.schedule_time);
    let job = db.store.job_get(lapsed).await.unwrap();
    assert_eq!((job.status, job.attempt), (Status::Pending, 1));
    assert!(job.last_error.unwrap().contains("not found on kafka"));
    let job = db.store.job_get(by_hand).await.unwrap();
    assert_eq!((job.status, job.last_error), (Status::Pending, None));
    let last = db.store.job_history(lapsed).await.unwrap().pop().unwrap();
    assert_eq!((last.status, last.attempt), (Status::Pending, 1));
    assert!(
        db.store.job_doubt_absent(&doubts).await.unwrap().is_empty(),
        "once"
    );
    assert_eq!(
        status(&db, held).await,
        Status::Dispatching,
        "its lease holds"
    );

    // Claimed again, the old doubt no longer applies to it.
    db.store
        .job_claim_many(&[lapsed], 7, LEASE, &db.fence)
        .await
        .unwrap();
    db.edit(
        "UPDATE jobs SET claim_expires_at = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE id = ?",
        lapsed,
    )
    .await;
    assert!(db
        .store
        .job_doubt_absent(&doubts[..1])
        .await
        .unwrap()
        .is_empty());
    assert_eq!(status(&db, lapsed).await, Status::Dispatching);
    db.finish().await;
}

// ---------------------------------------------------------------------------
// expire_many, release_many

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_ends_only_first_attempts_past_their_expiry() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let expiring = |at| NewJob {
        expires_at: Some(at),
        ..job_new("store-test", -1_000)
    };
    let (rows, _) = db
        .store
        .job_insert_many(&[
            expiring(now - Span::seconds(1)),
            expiring(now + Span::hours(1)),
            expiring(now - Span::seconds(1)),
            job_new("store-test", -1_000),
        ])
        .await
        .unwrap();
    let ids: Vec<JobId> = rows.iter().map(|r| created(r).id).collect();
    let (past, future, retry, never) = (ids[0], ids[1], ids[2], ids[3]);
    db.edit("UPDATE jobs SET attempt = 2 WHERE id = ?", retry)
        .await;

    assert_eq!(db.store.job_expire_many(&ids).await.unwrap(), 1);
    let job = db.store.job_get(past).await.unwrap();
    assert_eq!((job.status, job.version), (Status::Expired, 2));
    assert_eq!(
        job.last_error.as_deref(),
        Some("expired: not produced by its expires_at")
    );
    assert_eq!(
        db.store
            .job_history(past)
            .await
            .unwrap()
            .pop()
            .unwrap()
            .status,
        Status::Expired
    );
    for id in [future, retry, never] {
        assert_eq!(status(&db, id).await, Status::Pending);
    }
    assert_eq!(db.store.job_expire_many(&ids).await.unwrap(), 0);
    assert_eq!(db.store.job_expire_many(&[]).await.unwrap(), 0);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_sends_a_claims_unsent_jobs_back_without_counting_an_attempt() {
    let db = Db::new().await;
    let a = db.job(-1_000, 5).await;
    let b = db.job(-1_000, 5).await;
    let elsewhere = db.job(-1_000, 5).await;
    db.store
        .job_claim_many(&[a, b], 8, LEASE, &db.fence)
        .await
        .unwrap();
    db.store
        .job_claim_many(&[elsewhere], 9, LEASE, &db.fence)
        .await
        .unwrap();
    let released = db
        .store
        .job_release_many(8, &[a, b, elsewhere], "broker unavailable")
        .await
        .unwrap();
    assert_eq!(released, 2, "only the claim's own jobs");
    let job = db.store.job_get(a).await.unwrap();
    assert_eq!(
        (
            job.status,
            job.attempt,
            job.version,
            job.last_error.as_deref()
        ),
        (Status::Pending, 1, 3, Some("broker unavailable"))
    );
    let last = db.store.job_history(a).await.unwrap().pop().unwrap();
    assert_eq!((last.status, last.attempt), (Status::Pending, 1));
    assert_eq!(status(&db, elsewhere).await, Status::Dispatching);
    assert_eq!(
        db.store.job_release_many(8, &[a], "again").await.unwrap(),
        0
    );
    assert_eq!(db.store.job_release_many(8, &[], "x").await.unwrap(), 0);

    let again = db
        .store
        .job_claim_many(&[a], 10, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(won(&again), [a], "a released job can be claimed again");
    db.finish().await;
}

// ---------------------------------------------------------------------------
// list_pending, list_overdue, list_edited

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pending_scans_a_time_range_in_order_and_pages_through_equal_times() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let minutes = |n: i64| now + Span::minutes(n);
    let early = job_at(&db, "store-test", minutes(-1)).await;
    let held = job_at(&db, "held", minutes(-1) + Span::seconds(30)).await;
    let (rows, _) = db
        .store
        .job_insert_many(&[
            NewJob {
                schedule: Schedule::At(minutes(1)),
                ..job_new("store-test", 0)
            },
            NewJob {
                schedule: Schedule::At(minutes(1)),
                ..job_new("store-test", 0)
            },
        ])
        .await
        .unwrap();
    let (twin1, twin2) = (created(&rows[0]).id, created(&rows[1]).id);
    let at_until = job_at(&db, "store-test", minutes(10)).await;
    let cancelled = job_at(&db, "store-test", minutes(1)).await;
    db.store.job_cancel(cancelled).await.unwrap();
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

    let until = minutes(10);
    let all = db
        .store
        .job_list_pending(None, until, None, 100)
        .await
        .unwrap();
    assert_eq!(
        entry_ids(&all),
        [early, held, twin1, twin2],
        "by time then id; until is exclusive"
    );
    assert_eq!(all[0].schedule_time, minutes(-1));
    let from = db
        .store
        .job_list_pending(Some(minutes(1)), until, None, 100)
        .await
        .unwrap();
    assert_eq!(entry_ids(&from), [twin1, twin2], "from is inclusive");
    let page = db
        .store
        .job_list_pending(None, until, None, 3)
        .await
        .unwrap();
    assert_eq!(entry_ids(&page), [early, held, twin1]);
    let rest = db
        .store
        .job_list_pending(None, until, Some(page[2]), 3)
        .await
        .unwrap();
    assert_eq!(
        entry_ids(&rest),
        [twin2],
        "the twin at the same time is not skipped"
    );
    assert!(entry_ids(
        &db.store
            .job_list_pending(None, minutes(11), None, 100)
            .await
            .unwrap()
    )
    .contains(&at_until));

    let overdue = db.store.job_list_overdue(until, None, 100).await.unwrap();
    assert_eq!(
        entry_ids(&overdue),
        [early, twin1, twin2],
        "a paused topic's jobs are left out"
    );
    let overdue_rest = db
        .store
        .job_list_overdue(until, Some(overdue[1]), 100)
        .await
        .unwrap();
    assert_eq!(entry_ids(&overdue_rest), [twin2]);
    db.finish().await;
}

/// The loader's scan of edited rows: pending rows changed at or after
/// `since` (by tickler or by hand), never fresh inserts, due before
/// `until`, paged by (change time, id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_edited_finds_pending_rows_changed_since_and_pages_by_change_time() {
    let db = Db::new().await;
    let fresh = db.job(60_000, 5).await;
    let modified = db.job(60_000, 5).await;
    let hand = db.job(60_000, 5).await;
    let twin1 = db.job(60_000, 5).await;
    let twin2 = db.job(60_000, 5).await;
    let far = db.job(60_000, 5).await;
    let gone = db.job(60_000, 5).await;
    // An edit is told from an insert by updated_at > created_at, at the
    // database's millisecond.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let since = db.store.db_now().await.unwrap();
    let earlier = JobChanges {
        schedule: Some(Schedule::After { delay_ms: 30_000 }),
        ..JobChanges::default()
    };
    assert!(matches!(
        db.store.job_modify(modified, 1, &earlier).await.unwrap(),
        Modified::Applied(..)
    ));
    db.edit(
        "UPDATE jobs SET schedule_time = UTC_TIMESTAMP(3) WHERE id = ?",
        hand,
    )
    .await;
    sqlx::query(
        "UPDATE jobs SET schedule_time = schedule_time + INTERVAL 1 SECOND WHERE id IN (?, ?)",
    )
    .bind(twin1)
    .bind(twin2)
    .execute(&db.sql)
    .await
    .unwrap();
    db.edit(
        "UPDATE jobs SET schedule_time = UTC_TIMESTAMP(3) + INTERVAL 1 DAY WHERE id = ?",
        far,
    )
    .await;
    db.edit(
        "UPDATE jobs SET schedule_time = UTC_TIMESTAMP(3) WHERE id = ?",
        gone,
    )
    .await;
    db.store.job_cancel(gone).await.unwrap();

    let until = db.store.db_now().await.unwrap() + Span::hours(1);
    let (all, last) = db
        .store
        .job_list_edited(since, None, until, 100)
        .await
        .unwrap();
    let mut listed = entry_ids(&all);
    listed.sort_unstable();
    assert_eq!(listed, [modified, hand, twin1, twin2]);
    assert!(!listed.contains(&fresh));
    let twins_at = db.store.job_get(twin1).await.unwrap().updated_at;
    assert_eq!(
        db.store.job_get(twin2).await.unwrap().updated_at,
        twins_at,
        "one UPDATE, one change time"
    );
    assert!(last.is_some());

    // Paging: one row at a time reaches every row, the twins included.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let (page, last) = db
            .store
            .job_list_edited(since, after, until, 1)
            .await
            .unwrap();
        if page.is_empty() {
            assert_eq!(last, None);
            break;
        }
        paged.extend(entry_ids(&page));
        after = last;
    }
    assert_eq!(paged, entry_ids(&all));

    let later = db.store.db_now().await.unwrap() + Span::seconds(1);
    assert!(db
        .store
        .job_list_edited(later, None, until, 100)
        .await
        .unwrap()
        .0
        .is_empty());
    db.finish().await;
}

// ---------------------------------------------------------------------------
// the claim columns

/// The claim columns keep their size from create to release (V37): a job
/// is created with placeholders the claim overwrites, a release puts them
/// back, and the mark sets them NULL as it writes the position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_columns_hold_placeholders_whenever_no_claim_holds_the_job() {
    let db = Db::new().await;
    let id = db.job(-1_000, 5).await;
    let claim = |id: JobId| {
        sqlx::query_as::<_, (Option<u64>, Option<u64>, Option<String>, Option<String>)>(
            "SELECT claim_token, claimed_by, CAST(claimed_at AS CHAR), \
             CAST(claim_expires_at AS CHAR) FROM jobs WHERE id = ?",
        )
        .bind(id)
        .fetch_one(&db.sql)
    };
    let epoch = Some("1970-01-01 00:00:00.000".to_owned());
    let none = (Some(0), Some(0), epoch.clone(), epoch.clone());
    assert_eq!(claim(id).await.unwrap(), none, "as created");

    db.store
        .job_claim_many(&[id], 8, LEASE, &db.fence)
        .await
        .unwrap();
    let (token, by, at, until) = claim(id).await.unwrap();
    assert_eq!((token, by), (Some(8), Some(db.fence.instance)));
    assert!(at > epoch && until > at, "{at:?} {until:?}");

    db.store
        .job_release_many(8, &[id], "broker unavailable")
        .await
        .unwrap();
    assert_eq!(claim(id).await.unwrap(), none, "released");

    db.store
        .job_claim_many(&[id], 9, LEASE, &db.fence)
        .await
        .unwrap();
    let marked = db
        .store
        .job_mark_dispatched_many(&[mark(id, 9, 42)])
        .await
        .unwrap();
    assert_eq!(marked.marked, 1);
    assert_eq!(claim(id).await.unwrap(), (None, None, None, None), "marked");
    assert_eq!(db.store.job_get(id).await.unwrap().kafka_offset, Some(42));
    db.finish().await;
}
