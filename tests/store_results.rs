//! The store's methods for what follows a dispatch (src/store/results.rs):
//! consumers' reports, missed ack deadlines, refused sends, redrive, the
//! retention purge and the dead-letter outbox — what each answers, what it
//! leaves in the rows and their history, and what it leaves alone.

use std::time::Duration;

use chrono::Duration as Span;
use tickler::domain::job::{JobId, NewJob, Schedule, Status};
use tickler::domain::outcome::{Ignored, Outcome, ResultReport};
use tickler::domain::policy::Policy;
use tickler::store::{Actor, Disposition, Redriven, StoreError};
use tickler_testkit::store::{job_new, Db, LEASE};

/// A due job on `topic` whose consumer reports back, with `max_attempts`.
async fn expecting(db: &Db, topic: &str, max_attempts: u32) -> JobId {
    let job = NewJob {
        policy: Policy {
            expects_result: true,
            max_attempts,
            backoff_base_ms: 1_000,
            backoff_cap_ms: 60_000,
            ack_timeout_ms: 60_000,
        },
        ..job_new(topic, -1_000)
    };
    db.store.job_insert(&job).await.unwrap().0.id
}

fn report(job_id: JobId, attempt: u32, outcome: Outcome) -> ResultReport {
    ResultReport {
        job_id,
        attempt,
        outcome,
        error: None,
        retry_after_ms: None,
    }
}

fn never(_: &str) -> bool {
    false
}

async fn events(db: &Db, id: JobId) -> usize {
    db.store.job_history(id).await.unwrap().len()
}

// ---------------------------------------------------------------------------
// report_many

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ok_report_succeeds_the_current_attempt_and_a_repeat_is_ignored() {
    let db = Db::new().await;
    let results = db.store_as(Actor::Results);
    let id = expecting(&db, "store-test", 3).await;
    db.dispatch(&[id], 1).await;

    let settled = results
        .job_report_many(&[report(id, 1, Outcome::Ok)], &never)
        .await
        .unwrap();
    assert_eq!(
        settled.dispositions,
        [Disposition::Applied(Status::Succeeded)]
    );
    assert_eq!((settled.succeeded, settled.dead), (1, 0));
    assert!(settled.retried.is_empty() && settled.db_now.is_none());
    let job = db.store.job_get(id).await.unwrap();
    assert_eq!(
        (job.status, job.attempt, job.ack_deadline, job.kafka_offset),
        (Status::Succeeded, 1, None, Some(id as i64))
    );
    let last = db.store.job_history(id).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.actor.as_str(), last.status),
        ("results", Status::Succeeded)
    );

    let again = results
        .job_report_many(&[report(id, 1, Outcome::Retry)], &never)
        .await
        .unwrap();
    assert_eq!(
        again.dispositions,
        [Disposition::Ignored(Ignored::Finished)]
    );
    assert_eq!(db.store.job_get(id).await.unwrap(), job);
    results.close().await;
    db.finish().await;
}

/// A report that changes nothing says why, and leaves the row and its
/// history as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_that_changes_nothing_says_why() {
    let db = Db::new().await;
    let sent = expecting(&db, "store-test", 3).await;
    let fire_and_forget = db.job(-1_000, 3).await;
    db.dispatch(&[sent, fire_and_forget], 1).await;
    let waiting = expecting(&db, "store-test", 3).await;
    let cancelled = expecting(&db, "store-test", 3).await;
    db.store.job_cancel(cancelled).await.unwrap();

    let all = [sent, fire_and_forget, waiting, cancelled];
    let reports = [
        report(404_404, 1, Outcome::Ok),
        report(sent, 2, Outcome::Ok),
        report(fire_and_forget, 1, Outcome::Ok),
        report(waiting, 1, Outcome::Ok),
        report(cancelled, 1, Outcome::Failed),
    ];
    let before = db.store.job_get_many(&all).await.unwrap();
    let history: Vec<usize> = event_counts(&db, &all).await;
    let settled = db.store.job_report_many(&reports, &never).await.unwrap();
    assert_eq!(
        settled.dispositions,
        [
            Disposition::Ignored(Ignored::UnknownJob),
            Disposition::Ignored(Ignored::StaleAttempt),
            Disposition::Ignored(Ignored::NotExpected),
            Disposition::Ignored(Ignored::NotDispatched),
            Disposition::Ignored(Ignored::Finished),
        ]
    );
    assert_eq!(
        (settled.succeeded, settled.dead, settled.retried.len()),
        (0, 0, 0)
    );
    assert_eq!(db.store.job_get_many(&all).await.unwrap(), before);
    assert_eq!(event_counts(&db, &all).await, history);
    db.finish().await;
}

async fn event_counts(db: &Db, ids: &[JobId]) -> Vec<usize> {
    let mut counts = Vec::new();
    for id in ids {
        counts.push(events(db, *id).await);
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_report_sends_the_job_back_at_its_delay_with_the_next_attempt() {
    let db = Db::new().await;
    let results = db.store_as(Actor::Results);
    let asked = expecting(&db, "store-test", 2).await;
    let backed_off = expecting(&db, "store-test", 2).await;
    db.dispatch(&[asked, backed_off], 1).await;
    let before = db.store.db_now().await.unwrap();
    let settled = results
        .job_report_many(
            &[
                ResultReport {
                    error: Some("downstream busy".to_owned()),
                    retry_after_ms: Some(60_000),
                    ..report(asked, 1, Outcome::Retry)
                },
                report(backed_off, 1, Outcome::Retry),
            ],
            &never,
        )
        .await
        .unwrap();
    assert_eq!(
        settled.dispositions,
        [
            Disposition::Applied(Status::Pending),
            Disposition::Applied(Status::Pending)
        ]
    );
    let db_now = settled
        .db_now
        .expect("the clock the retries were placed by");
    let mut retried = settled.retried.clone();
    retried.sort_by_key(|e| e.id);
    assert_eq!(
        retried.iter().map(|e| e.id).collect::<Vec<_>>(),
        [asked, backed_off]
    );

    let job = db.store.job_get(asked).await.unwrap();
    assert_eq!(
        (
            job.status,
            job.attempt,
            job.ack_deadline,
            job.last_error.as_deref()
        ),
        (Status::Pending, 2, None, Some("downstream busy"))
    );
    assert!(job.schedule_time >= before + Span::seconds(60));
    assert!(job.schedule_time <= db_now + Span::seconds(60));
    assert_eq!(retried[0].schedule_time, job.schedule_time);
    let last = db.store.job_history(asked).await.unwrap().pop().unwrap();
    assert_eq!(
        (
            last.actor.as_str(),
            last.status,
            last.attempt,
            last.schedule_time
        ),
        ("results", Status::Pending, 2, job.schedule_time)
    );

    // Without a delay of its own: the policy's backoff for attempt 1,
    // between half the base and the base.
    let job = db.store.job_get(backed_off).await.unwrap();
    assert_eq!(
        job.last_error.as_deref(),
        Some("the consumer asked for a retry")
    );
    assert!(job.schedule_time >= before + Span::milliseconds(500));
    assert!(job.schedule_time <= db_now + Span::milliseconds(1_000));

    // The last attempt's retry is its death.
    db.edit(
        "UPDATE jobs SET schedule_time = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE id = ?",
        asked,
    )
    .await;
    db.dispatch(&[asked], 2).await;
    let settled = results
        .job_report_many(&[report(asked, 2, Outcome::Retry)], &never)
        .await
        .unwrap();
    assert_eq!(settled.dispositions, [Disposition::Applied(Status::Dead)]);
    assert_eq!(
        (settled.dead, settled.dead_ids.as_slice()),
        (1, &[asked][..])
    );
    let job = db.store.job_get(asked).await.unwrap();
    assert_eq!((job.status, job.attempt), (Status::Dead, 2));
    assert_eq!(
        job.last_error.as_deref(),
        Some("attempts exhausted (2 of 2): the consumer asked for a retry")
    );
    results.close().await;
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_report_kills_the_job_and_owes_a_dead_letter_where_its_topic_has_one() {
    let db = Db::new().await;
    let lettered = expecting(&db, "with-dlq", 5).await;
    let plain = expecting(&db, "without", 5).await;
    db.dispatch(&[lettered, plain], 1).await;
    let settled = db
        .store
        .job_report_many(
            &[
                ResultReport {
                    error: Some("bad payload".to_owned()),
                    ..report(lettered, 1, Outcome::Failed)
                },
                report(plain, 1, Outcome::Failed),
            ],
            &|topic| topic == "with-dlq",
        )
        .await
        .unwrap();
    assert_eq!((settled.dead, settled.dead_lettered), (2, 1));
    let mut dead = settled.dead_ids.clone();
    dead.sort_unstable();
    assert_eq!(dead, [lettered, plain]);
    let job = db.store.job_get(lettered).await.unwrap();
    assert_eq!(
        (job.status, job.attempt, job.last_error.as_deref()),
        (Status::Dead, 1, Some("bad payload"))
    );
    assert_eq!(
        db.store.job_get(plain).await.unwrap().last_error.as_deref(),
        Some("the consumer reported failed")
    );
    let letters = db.store.dead_letter_claim(1, LEASE, 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (
            letters[0].job.id,
            letters[0].attempt,
            letters[0].error.as_deref()
        ),
        (lettered, 1, Some("bad payload"))
    );
    db.finish().await;
}

/// A consumer may answer before the dispatcher marks the job; reports of
/// one job in one batch are judged one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_apply_while_dispatching_and_each_sees_the_one_before() {
    let db = Db::new().await;
    let done = expecting(&db, "store-test", 3).await;
    let retried = expecting(&db, "store-test", 3).await;
    db.store
        .job_claim_many(&[done, retried], 1, LEASE, &db.fence)
        .await
        .unwrap();
    let settled = db
        .store
        .job_report_many(
            &[
                report(done, 1, Outcome::Ok),
                report(retried, 1, Outcome::Retry),
                report(done, 1, Outcome::Failed),
                report(retried, 1, Outcome::Ok),
            ],
            &never,
        )
        .await
        .unwrap();
    assert_eq!(
        settled.dispositions,
        [
            Disposition::Applied(Status::Succeeded),
            Disposition::Applied(Status::Pending),
            Disposition::Ignored(Ignored::Finished),
            Disposition::Ignored(Ignored::StaleAttempt),
        ]
    );
    assert_eq!(
        db.store.job_get(done).await.unwrap().status,
        Status::Succeeded
    );
    let job = db.store.job_get(retried).await.unwrap();
    assert_eq!((job.status, job.attempt), (Status::Pending, 2));
    db.finish().await;
}

// ---------------------------------------------------------------------------
// ack_expire

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_ack_deadline_counts_as_a_retry_request() {
    let db = Db::new().await;
    let retried = expecting(&db, "with-dlq", 3).await;
    let buried = expecting(&db, "with-dlq", 1).await;
    let waiting = expecting(&db, "with-dlq", 3).await;
    let fire_and_forget = db.job(-1_000, 3).await;
    db.dispatch(&[retried, buried, waiting, fire_and_forget], 1)
        .await;
    assert!(
        db.store
            .job_ack_expire(100, &never)
            .await
            .unwrap()
            .retried
            .is_empty(),
        "no deadline has passed"
    );
    db.edit(
        "UPDATE jobs SET ack_deadline = UTC_TIMESTAMP(3) - INTERVAL 2 HOUR WHERE id = ?",
        retried,
    )
    .await;
    db.edit(
        "UPDATE jobs SET ack_deadline = UTC_TIMESTAMP(3) - INTERVAL 1 HOUR WHERE id = ?",
        buried,
    )
    .await;

    let first = db
        .store
        .job_ack_expire(1, &|t| t == "with-dlq")
        .await
        .unwrap();
    assert_eq!(
        first.retried.iter().map(|e| e.id).collect::<Vec<_>>(),
        [retried],
        "the oldest deadline first, at most the limit"
    );
    assert!(first.dispositions.is_empty());
    assert!(first.db_now.is_some());
    let job = db.store.job_get(retried).await.unwrap();
    assert_eq!(
        (
            job.status,
            job.attempt,
            job.ack_deadline,
            job.last_error.as_deref()
        ),
        (
            Status::Pending,
            2,
            None,
            Some("no result within the ack timeout of 60000 ms")
        )
    );

    let rest = db
        .store
        .job_ack_expire(100, &|t| t == "with-dlq")
        .await
        .unwrap();
    assert_eq!(
        (rest.dead_ids.as_slice(), rest.dead_lettered),
        (&[buried][..], 1)
    );
    let job = db.store.job_get(buried).await.unwrap();
    assert_eq!(job.status, Status::Dead);
    assert!(job
        .last_error
        .unwrap()
        .starts_with("attempts exhausted (1 of 1): no result"));
    for id in [waiting, fire_and_forget] {
        assert_eq!(
            db.store.job_get(id).await.unwrap().status,
            Status::Dispatched
        );
    }
    let nothing = db.store.job_ack_expire(100, &never).await.unwrap();
    assert_eq!((nothing.retried.len(), nothing.dead), (0, 0));
    db.finish().await;
}

// ---------------------------------------------------------------------------
// refuse_many

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

/// A refusal is about a claim in flight: a job already marked (or never
/// claimed) is left alone, and one that dies of it owes a dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_touches_only_claims_in_flight_and_owes_a_dead_letter() {
    let db = Db::new().await;
    let marked = db.job(-1_000, 3).await;
    db.dispatch(&[marked], 5).await;
    let pending = db.job(-1_000, 3).await;
    let buried = db.job(-1_000, 1).await;
    db.store
        .job_claim_many(&[buried], 5, LEASE, &db.fence)
        .await
        .unwrap();
    let refusals: Vec<(JobId, String)> = [marked, pending, buried, 404_404]
        .iter()
        .map(|id| (*id, "record too large".to_owned()))
        .collect();
    let settled = db
        .store
        .job_refuse_many(5, &refusals, &|_| true)
        .await
        .unwrap();
    assert_eq!(
        (settled.dead_ids.as_slice(), settled.dead_lettered),
        (&[buried][..], 1)
    );
    assert!(settled.dispositions.is_empty());
    assert_eq!(
        db.store.job_get(marked).await.unwrap().status,
        Status::Dispatched
    );
    assert_eq!(
        db.store.job_get(pending).await.unwrap().status,
        Status::Pending
    );
    let letters = db.store.dead_letter_claim(1, LEASE, 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert!(letters[0]
        .error
        .as_deref()
        .unwrap()
        .contains("the broker refused the record: record too large"));
    let none = db.store.job_refuse_many(5, &[], &never).await.unwrap();
    assert_eq!((none.retried.len(), none.dead), (0, 0));
    db.finish().await;
}

// ---------------------------------------------------------------------------
// redrive

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_gives_a_dead_job_more_attempts_and_refuses_any_other() {
    let db = Db::new().await;
    let api = db.store_as(Actor::Api).with_actor("api:ops");
    let dead = expecting(&db, "store-test", 1).await;
    db.dispatch(&[dead], 1).await;
    db.store
        .job_report_many(&[report(dead, 1, Outcome::Failed)], &never)
        .await
        .unwrap();
    let before = api.db_now().await.unwrap();
    let job = match api.job_redrive(dead, 3, None).await.unwrap() {
        Redriven::Applied(job, db_now) => {
            assert!(
                job.schedule_time >= before && job.schedule_time <= db_now,
                "due now"
            );
            job
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (
            job.status,
            job.attempt,
            job.policy.max_attempts,
            job.ack_deadline
        ),
        (Status::Pending, 2, 4, None),
        "the attempt number goes on; three more attempts"
    );
    let last = db.store.job_history(dead).await.unwrap().pop().unwrap();
    assert_eq!(
        (last.actor.as_str(), last.status, last.attempt),
        ("api:ops", Status::Pending, 2)
    );

    match api.job_redrive(dead, 3, None).await.unwrap() {
        Redriven::NotDead(same) => assert_eq!(same, job),
        other => panic!("{other:?}"),
    }
    for finished in ["succeeded", "cancelled"] {
        let id = db.job(60_000, 1).await;
        db.edit(
            &format!("UPDATE jobs SET status = '{finished}' WHERE id = ?"),
            id,
        )
        .await;
        assert!(matches!(
            api.job_redrive(id, 1, None).await.unwrap(),
            Redriven::NotDead(j) if j.status.as_str() == finished
        ));
    }
    assert!(matches!(
        api.job_redrive(404_404, 1, None).await,
        Err(StoreError::NotFound(404_404))
    ));

    let redriven = |schedule| {
        let (db, api) = (&db, &api);
        async move {
            let id = db.job(60_000, 1).await;
            db.edit("UPDATE jobs SET status = 'dead' WHERE id = ?", id)
                .await;
            match api.job_redrive(id, 1, Some(schedule)).await.unwrap() {
                Redriven::Applied(job, db_now) => (job.schedule_time, db_now),
                other => panic!("{other:?}"),
            }
        }
    };
    let at = before + Span::hours(1);
    assert_eq!(redriven(Schedule::At(at)).await.0, at);
    let before = api.db_now().await.unwrap();
    let (delayed, db_now) = redriven(Schedule::After { delay_ms: 60_000 }).await;
    assert!(delayed >= before + Span::seconds(60) && delayed <= db_now + Span::seconds(60));
    api.close().await;
    db.finish().await;
}

// ---------------------------------------------------------------------------
// purge_finished

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

/// The oldest finished jobs go first, whatever their status: a backlog of
/// one kind does not keep an older job of another waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_takes_the_oldest_finished_first_across_statuses() {
    let db = Db::new().await;
    let sent = db.job(-1_000, 3).await;
    let succeeded = expecting(&db, "store-test", 3).await;
    db.dispatch(&[sent, succeeded], 1).await;
    db.store
        .job_report_many(&[report(succeeded, 1, Outcome::Ok)], &never)
        .await
        .unwrap();
    // The dispatched job finished three hours ago, the succeeded one two.
    for (id, hours) in [(sent, 3), (succeeded, 2)] {
        sqlx::query("UPDATE jobs SET updated_at = UTC_TIMESTAMP(3) - INTERVAL ? HOUR WHERE id = ?")
            .bind(hours)
            .bind(id)
            .execute(&db.sql)
            .await
            .unwrap();
    }

    let hour = Duration::from_secs(3_600);
    assert_eq!(db.store.job_purge_finished(hour, 1).await.unwrap(), 1);
    assert!(
        matches!(db.store.job_get(sent).await, Err(StoreError::NotFound(_))),
        "the older one went first"
    );
    db.store.job_get(succeeded).await.unwrap();
    assert_eq!(db.store.job_purge_finished(hour, 1).await.unwrap(), 1);
    assert!(matches!(
        db.store.job_get(succeeded).await,
        Err(StoreError::NotFound(_))
    ));
    db.finish().await;
}

/// Every finished kind goes, with its history, at most `limit` at a time;
/// a job still waiting for its result, or not finished, stays however old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_takes_every_finished_kind_with_its_history_and_keeps_what_still_waits() {
    let db = Db::new().await;
    let awaiting = expecting(&db, "store-test", 3).await;
    let sent = db.job(-1_000, 3).await;
    let succeeded = expecting(&db, "store-test", 3).await;
    db.dispatch(&[awaiting, sent, succeeded], 1).await;
    db.store
        .job_report_many(&[report(succeeded, 1, Outcome::Ok)], &never)
        .await
        .unwrap();
    let dead = db.job(60_000, 1).await;
    db.edit("UPDATE jobs SET status = 'dead' WHERE id = ?", dead)
        .await;
    let cancelled = db.job(60_000, 1).await;
    db.store.job_cancel(cancelled).await.unwrap();
    let pending = db.job(60_000, 1).await;
    let claimed = db.job(-1_000, 1).await;
    db.store
        .job_claim_many(&[claimed], 2, LEASE, &db.fence)
        .await
        .unwrap();
    sqlx::query("UPDATE jobs SET updated_at = UTC_TIMESTAMP(3) - INTERVAL 2 HOUR")
        .execute(&db.sql)
        .await
        .unwrap();

    let hour = Duration::from_secs(3_600);
    assert_eq!(
        db.store.job_purge_finished(hour, 1).await.unwrap(),
        1,
        "at most the limit"
    );
    assert_eq!(db.store.job_purge_finished(hour, 100).await.unwrap(), 3);
    assert_eq!(db.store.job_purge_finished(hour, 100).await.unwrap(), 0);
    for id in [sent, succeeded, dead, cancelled] {
        assert!(matches!(
            db.store.job_get(id).await,
            Err(StoreError::NotFound(_))
        ));
        assert!(
            matches!(db.store.job_history(id).await, Err(StoreError::NotFound(_))),
            "its history too"
        );
    }
    for id in [awaiting, pending, claimed] {
        db.store.job_get(id).await.unwrap();
        assert!(!db.store.job_history(id).await.unwrap().is_empty());
    }
    db.finish().await;
}

// ---------------------------------------------------------------------------
// dead_letter_claim, dead_letter_delete

/// A dead job whose row a person garbled (headers the column accepts but
/// no job has, a payload that does not expand) holds up no letter, and
/// its own goes at once without its payload and headers, never waiting
/// without end for a repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_whose_job_does_not_decode_goes_without_its_body() {
    let db = Db::new().await;
    let garbled = expecting(&db, "with-dlq", 1).await;
    let unexpanding = expecting(&db, "with-dlq", 1).await;
    let fine = expecting(&db, "with-dlq", 1).await;
    db.dispatch(&[garbled, unexpanding, fine], 1).await;
    for id in [garbled, unexpanding, fine] {
        db.store
            .job_report_many(&[report(id, 1, Outcome::Failed)], &|_| true)
            .await
            .unwrap();
    }
    db.edit("UPDATE jobs SET headers = '7' WHERE id = ?", garbled)
        .await;
    db.edit(
        "UPDATE jobs SET payload_kind = 'json+zstd', payload = x'0000ffff' WHERE id = ?",
        unexpanding,
    )
    .await;
    let mut letters = db.store.dead_letter_claim(1, LEASE, 10).await.unwrap();
    letters.sort_by_key(|letter| letter.job.id);
    let mut ids = [garbled, unexpanding, fine];
    ids.sort_unstable();
    assert_eq!(letters.iter().map(|l| l.job.id).collect::<Vec<_>>(), ids);
    for letter in &letters {
        if letter.job.id == fine {
            assert!(!letter.job.payload.is_empty());
        } else {
            assert!(letter.job.payload.is_empty(), "job {}", letter.job.id);
            assert!(letter.job.headers.is_empty(), "job {}", letter.job.id);
        }
    }
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_claimed_for_a_lease_tried_again_after_it_and_forgotten_once_sent() {
    let db = Db::new().await;
    let first = expecting(&db, "with-dlq", 1).await;
    let second = expecting(&db, "with-dlq", 1).await;
    let orphan = expecting(&db, "with-dlq", 1).await;
    db.dispatch(&[first, second, orphan], 1).await;
    for id in [first, second, orphan] {
        db.store
            .job_report_many(&[report(id, 1, Outcome::Failed)], &|_| true)
            .await
            .unwrap();
    }
    // Written in one millisecond or not, `first` is the oldest.
    db.edit(
        "UPDATE dead_letters SET created_at = created_at - INTERVAL 1 MINUTE WHERE job_id = ?",
        first,
    )
    .await;
    assert!(db
        .store
        .dead_letter_claim(9, LEASE, 0)
        .await
        .unwrap()
        .is_empty());
    let letters = db.store.dead_letter_claim(1, LEASE, 1).await.unwrap();
    assert_eq!(
        letters
            .iter()
            .map(|l| (l.job.id, l.attempt, l.tries))
            .collect::<Vec<_>>(),
        [(first, 1, 1)],
        "the oldest first, at most the limit"
    );
    assert_eq!(letters[0].job.status, Status::Dead);
    assert_eq!(
        letters[0].error.as_deref(),
        Some("the consumer reported failed")
    );

    // The job of a letter is purged before its record is sent: the letter
    // is dropped, not sent without its job.
    db.edit("DELETE FROM jobs WHERE id = ?", orphan).await;
    let others = db.store.dead_letter_claim(2, LEASE, 10).await.unwrap();
    assert_eq!(
        others.iter().map(|l| l.job.id).collect::<Vec<_>>(),
        [second],
        "the first is leased to claim 1; the orphan is dropped"
    );
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM dead_letters")
        .fetch_one(&db.sql)
        .await
        .unwrap();
    assert_eq!(rows, 2);

    // Claim 1 failed to send: after its lease the letter is claimed again.
    db.edit(
        "UPDATE dead_letters SET claimed_until = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE job_id = ?",
        first,
    )
    .await;
    let retry = db.store.dead_letter_claim(3, LEASE, 10).await.unwrap();
    assert_eq!(
        retry
            .iter()
            .map(|l| (l.job.id, l.tries))
            .collect::<Vec<_>>(),
        [(first, 2)]
    );

    db.store
        .dead_letter_delete(&[(first, 1), (second, 1), (second, 9)])
        .await
        .unwrap();
    db.store.dead_letter_delete(&[]).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM dead_letters")
        .fetch_one(&db.sql)
        .await
        .unwrap();
    assert_eq!(rows, 0);
    sqlx::query("UPDATE dead_letters SET claimed_until = NULL")
        .execute(&db.sql)
        .await
        .unwrap();
    assert!(db
        .store
        .dead_letter_claim(4, LEASE, 10)
        .await
        .unwrap()
        .is_empty());
    db.finish().await;
}
