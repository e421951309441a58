//! Compare-and-set, not locks (#62): a write that decided on a row read
//! plainly repeats what it read, so a change made between its read and its
//! write — by a person with plain SQL, which need not move the row's
//! version — is kept, and the write is decided again on the row as it is
//! now. Each test holds one write between its read and its write with a
//! fail point (`return(<ms>)`, once) and changes the row in that gap; each
//! fail point is set by one test only, so the file's tests run in parallel.
//!
//! Fail points: `results-read` (a batch of reports decided, not yet
//! written), `job-modify-read` (a change built on the row as read, not yet
//! written), `schedule-read` (a schedule's change built, not yet written).

#![cfg(feature = "failpoints")]

use std::collections::BTreeMap;
use std::time::Duration;

use tickler::domain::job::{JobId, NewJob, Status};
use tickler::domain::outcome::{Ignored, Outcome, ResultReport};
use tickler::domain::policy::Policy;
use tickler::store::{Actor, Disposition, JobChanges, Modified};
use tickler_testkit::store::{job_new, Db};

/// How long a fail point holds its write: the test's edit is made well
/// inside it (the edit takes no lock the held write waits on).
const HOLD: &str = "1*return(600)";
const EDIT_AFTER: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_decided_on_a_row_a_person_then_finished_leaves_it_finished() {
    let db = Db::new().await;
    let job = NewJob {
        policy: Policy {
            expects_result: true,
            max_attempts: 3,
            backoff_base_ms: 1_000,
            backoff_cap_ms: 60_000,
            ack_timeout_ms: 60_000,
        },
        ..job_new("store-test", -1_000)
    };
    let id: JobId = db.store.job_insert(&job).await.unwrap().0.id;
    db.dispatch(&[id], 1).await;
    let version = db.store.job_get(id).await.unwrap().version;

    fail::cfg("results-read", HOLD).unwrap();
    let results = db.store_as(Actor::Results);
    let report = tokio::spawn(async move {
        results
            .job_report_many(
                &[ResultReport {
                    job_id: id,
                    attempt: 1,
                    outcome: Outcome::Retry,
                    error: None,
                    retry_after_ms: None,
                }],
                &|_| false,
            )
            .await
    });
    tokio::time::sleep(EDIT_AFTER).await;
    // An operator settles the job by hand, leaving its version as it was:
    // the report's write must not take it back to pending.
    db.edit("UPDATE jobs SET status = 'succeeded' WHERE id = ?", id)
        .await;
    let settled = report.await.unwrap().unwrap();
    fail::remove("results-read");

    assert_eq!(
        settled.dispositions,
        vec![Disposition::Ignored(Ignored::Finished)]
    );
    assert!(settled.retried.is_empty());
    let now = db.store.job_get(id).await.unwrap();
    assert_eq!(now.status, Status::Succeeded);
    assert_eq!(now.attempt, 1, "the retry was not applied");
    assert_eq!(now.version, version, "only the hand edit wrote the row");
    let history = db.store.job_history(id).await.unwrap();
    assert!(
        history.iter().all(|event| event.attempt == 1),
        "no retry recorded: {history:?}"
    );
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_headers_keeps_a_payload_a_person_wrote_after_it_read_the_row() {
    let db = Db::new().await;
    let id: JobId = db
        .store
        .job_insert(&job_new("store-test", 3_600_000))
        .await
        .unwrap()
        .0
        .id;
    let version = db.store.job_get(id).await.unwrap().version;

    fail::cfg("job-modify-read", HOLD).unwrap();
    let store = db.store.clone();
    let change = tokio::spawn(async move {
        let changes = JobChanges {
            headers: Some(BTreeMap::from([("h".to_owned(), "1".to_owned())])),
            ..JobChanges::default()
        };
        store.job_modify(id, version, &changes).await
    });
    tokio::time::sleep(EDIT_AFTER).await;
    // A person repairs the payload by hand, version untouched: the change
    // of headers, built on the payload it read, must not write that back.
    db.edit("UPDATE jobs SET payload = '{\"fixed\":1}' WHERE id = ?", id)
        .await;
    let modified = change.await.unwrap().unwrap();
    fail::remove("job-modify-read");

    let Modified::Applied(job, _) = modified else {
        panic!("the change is applied on the row as it is now: {modified:?}");
    };
    assert_eq!(job.payload, br#"{"fixed":1}"#.to_vec());
    assert_eq!(job.headers.get("h").map(String::as_str), Some("1"));
    let now = db.store.job_get(id).await.unwrap();
    assert_eq!(now.payload, br#"{"fixed":1}"#.to_vec());
    assert_eq!(now.version, version + 1);
    db.finish().await;
}
