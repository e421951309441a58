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
//! written), `schedule-planned` (a schedule's occurrences planned and
//! inserted, its cursor not yet advanced), `bulk-read` (a bulk batch read,
//! not yet written), `debounce-read` (the key's job read as pending, not
//! yet moved), `claim-written` (a claim written, its fence not yet read
//! back), `rescue-read` (a dead instance's claims read, not yet put in
//! doubt), `recount-read` (a token's usage and its jobs counted, the
//! difference not yet added).

#![cfg(feature = "failpoints")]

use std::collections::BTreeMap;
use std::time::Duration;

use tickler::domain::job::{JobId, NewJob, PayloadKind, Status};
use tickler::domain::outcome::{Ignored, Outcome, ResultReport};
use tickler::domain::policy::Policy;
use tickler::domain::schedule::Misfire;
use tickler::store::{
    Actor, BulkAction, BulkFilter, Debounced, Disposition, JobChanges, Modified, NewSchedule,
    ScheduleDef, ScheduleStatus,
};
use tickler_testkit::store::{job_new, Db, LEASE};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn occurrences_planned_before_a_pause_are_not_left_behind_it() {
    let db = Db::new().await;
    let now = db.store.db_now().await.unwrap();
    let start = now + chrono::Duration::minutes(10);
    let def = ScheduleDef {
        payload: b"{}".to_vec(),
        payload_kind: PayloadKind::Json,
        headers: BTreeMap::new(),
        policy: Policy::default(),
        cron: None,
        time_zone: None,
        every_ms: Some(60_000),
        start_at: start,
        end_at: None,
        max_occurrences: None,
        misfire: Misfire::FireOnce,
        misfire_grace_ms: 60_000,
        window_ms: None,
        jitter_ms: None,
    };
    let schedule = db
        .store
        .schedule_insert(
            &NewSchedule {
                topic: "ticks".to_owned(),
                key: "race".to_owned(),
                def: def.clone(),
                created_by: "api:alice".to_owned(),
            },
            Some(start),
        )
        .await
        .unwrap();

    // A materializer plans and inserts the next half hour's occurrences,
    // then is held before it advances the schedule; the pause commits in
    // that gap (it cannot see the occurrences not yet committed).
    fail::cfg("schedule-planned", HOLD).unwrap();
    let store = db.store.clone();
    let materialize = tokio::spawn(async move {
        store
            .schedule_materialize(schedule.id, Duration::from_secs(40 * 60))
            .await
    });
    tokio::time::sleep(EDIT_AFTER).await;
    let (paused, _) = db.store.schedule_pause(schedule.id, true).await.unwrap();
    assert_eq!(paused.status, ScheduleStatus::Paused);
    let done = materialize.await.unwrap().unwrap();
    fail::remove("schedule-planned");

    assert!(
        done.created.is_empty(),
        "the pass is made again on the paused schedule: {} created",
        done.created.len()
    );
    let pending = db.store.schedule_pending(schedule.id, 100).await.unwrap();
    assert!(
        pending.is_empty(),
        "a paused schedule has no occurrences not yet due: {} pending",
        pending.len()
    );
    let now = db.store.schedule_get(schedule.id).await.unwrap();
    assert_eq!(now.status, ScheduleStatus::Paused);
    assert_eq!(now.occurrences, 0);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_batch_leaves_a_row_a_person_moved_out_of_its_filter() {
    let db = Db::new().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(db.job(60_000, 1).await);
    }
    let run_at_to = chrono::Utc::now() + chrono::Duration::minutes(5);
    let filter = BulkFilter {
        topic: Some("store-test".to_owned()),
        run_at_to: Some(run_at_to),
        ..BulkFilter::default()
    };
    let action = BulkAction::Shift { by_ms: 3_600_000 };
    let max_id = db.store.job_max_id().await.unwrap();
    let (total, _) = db
        .store
        .bulk_count(&filter, max_id, action.applies_to())
        .await
        .unwrap();
    assert_eq!(total, 3);
    let op_id = db
        .store
        .bulk_create("api:ops", &filter, &action, max_id, total, 1)
        .await
        .unwrap();
    let op = db.store.bulk_get(op_id).await.unwrap().unwrap();
    let batch = db.store.bulk_next(&op, 10).await.unwrap();
    assert_eq!(batch.len(), 3);

    fail::cfg("bulk-read", HOLD).unwrap();
    let store = db.store.clone();
    let apply = tokio::spawn(async move { store.bulk_apply(&op, &batch, |_| 1, |_| true).await });
    tokio::time::sleep(EDIT_AFTER).await;
    // A person moves one job a day out, past the operation's filter, with
    // its version as it was: the shift must not move it again.
    db.edit(
        "UPDATE jobs SET schedule_time = TIMESTAMPADD(DAY, 1, UTC_TIMESTAMP(3)) WHERE id = ?",
        ids[1],
    )
    .await;
    let done = apply.await.unwrap().unwrap().expect("the operation runs");
    fail::remove("bulk-read");

    let mut changed = done.changed.clone();
    changed.sort_unstable();
    assert_eq!(changed, vec![ids[0], ids[2]]);
    let moved = db.store.job_get(ids[1]).await.unwrap();
    let day = chrono::Utc::now() + chrono::Duration::days(1);
    assert!(
        (moved.schedule_time - day).num_minutes().abs() < 5,
        "the person's time is kept: {}",
        moved.schedule_time
    );
    for id in [ids[0], ids[2]] {
        let shifted = db.store.job_get(id).await.unwrap();
        assert!(shifted.schedule_time > run_at_to, "shifted by an hour");
    }
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debounce_does_not_move_a_job_whose_key_a_person_freed_after_it_read_it() {
    let db = Db::new().await;
    let keyed = |payload: &str| NewJob {
        key: Some("k".to_owned()),
        payload: payload.as_bytes().to_vec(),
        ..job_new("store-test", 3_600_000)
    };
    let first = match db
        .store
        .job_debounce(&keyed("1"), None, None)
        .await
        .unwrap()
    {
        Debounced::Created(job, _) => job,
        other => panic!("the first request creates: {other:?}"),
    };

    fail::cfg("debounce-read", HOLD).unwrap();
    let store = db.store.clone();
    let second = keyed("2");
    let debounce = tokio::spawn(async move { store.job_debounce(&second, None, None).await });
    tokio::time::sleep(EDIT_AFTER).await;
    // A person frees the key by hand (version untouched): the job keeps
    // what it had, and the request makes the key's next job.
    db.edit("UPDATE jobs SET job_key = NULL WHERE id = ?", first.id)
        .await;
    let debounced = debounce.await.unwrap().unwrap();
    fail::remove("debounce-read");

    let Debounced::Created(created, _) = debounced else {
        panic!("the key is free when the write comes: {debounced:?}");
    };
    assert_ne!(created.id, first.id);
    assert_eq!(created.payload, b"2".to_vec());
    let left = db.store.job_get(first.id).await.unwrap();
    assert_eq!(left.payload, b"1".to_vec(), "the freed job is left alone");
    assert_eq!(left.version, first.version);
    db.finish().await;
}

/// The claim's fence is read after its write (#62: the write names `jobs`
/// alone): an instance whose shards were taken over while it claimed —
/// here between the write and the read-back — sends nothing, and what it
/// won is pending again, as it was before the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_fence_stopped_holding_after_its_write_gives_back_what_it_won() {
    let db = Db::new().await;
    let id = db.job(-1_000, 3).await;
    let (before, updated): (u32, String) =
        sqlx::query_as("SELECT version, CAST(updated_at AS CHAR) FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&db.sql)
            .await
            .unwrap();

    // Every claim while it is set (the other tests here claim too, and
    // could take a single pause from this one): a wait, nothing more.
    fail::cfg("claim-written", "return(600)").unwrap();
    let store = db.store.clone();
    let fence = db.fence.clone();
    let claim = tokio::spawn(async move { store.job_claim_many(&[id], 7, LEASE, &fence).await });
    tokio::time::sleep(EDIT_AFTER).await;
    // Another instance takes the shards over (their epochs move on).
    sqlx::query("UPDATE shard_leases SET epoch = epoch + 1")
        .execute(&db.sql)
        .await
        .unwrap();
    let outcome = claim.await.unwrap().unwrap();
    fail::remove("claim-written");

    assert!(outcome.won.is_empty(), "nothing to send");
    assert_eq!(outcome.fenced, [id]);
    let (status, token, version, now_updated): (String, u64, u32, String) = sqlx::query_as(
        "SELECT CAST(status AS CHAR), claim_token, version, CAST(updated_at AS CHAR) \
         FROM jobs WHERE id = ?",
    )
    .bind(id)
    .fetch_one(&db.sql)
    .await
    .unwrap();
    assert_eq!((status.as_str(), token), ("pending", 0), "given back");
    assert_eq!(version, before + 2, "claimed, then given back");
    assert_eq!(now_updated, updated, "as it was before the claim");
    db.finish().await;
}

/// A dead instance's claims are put in doubt by a compare-and-set on the
/// claim the rescue read: a row claimed again meanwhile (here its token
/// changed by hand, as a new claim changes it) is left as it is, and the
/// others go in doubt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescue_leaves_a_claim_made_since_its_read() {
    let db = Db::new().await;
    let (kept, rescued) = (db.job(-1_000, 3).await, db.job(-1_000, 3).await);
    let claim = db
        .store
        .job_claim_many(&[kept, rescued], 5, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(claim.won.len(), 2);
    // The instance dies: its heartbeat is an hour old.
    sqlx::query("UPDATE instances SET heartbeat_at = TIMESTAMPADD(HOUR, -1, heartbeat_at)")
        .execute(&db.sql)
        .await
        .unwrap();

    fail::cfg("rescue-read", HOLD).unwrap();
    let membership = db.store_as(Actor::Membership);
    let rescue = tokio::spawn(async move {
        membership
            .job_rescue_dead(Duration::from_secs(30), Duration::from_secs(5), 100)
            .await
    });
    tokio::time::sleep(EDIT_AFTER).await;
    db.edit("UPDATE jobs SET claim_token = 99 WHERE id = ?", kept)
        .await;
    let count = rescue.await.unwrap().unwrap();
    fail::remove("rescue-read");

    assert_eq!(count, 1, "only the claim as it was read");
    let claimed_by = |id: JobId| {
        let sql = db.sql.clone();
        async move {
            sqlx::query_scalar::<_, Option<u64>>("SELECT claimed_by FROM jobs WHERE id = ?")
                .bind(id)
                .fetch_one(&sql)
                .await
                .unwrap()
        }
    };
    assert_eq!(claimed_by(kept).await, Some(db.fence.instance));
    assert_eq!(claimed_by(rescued).await, None, "in doubt");
    db.finish().await;
}

/// A quota's recount takes no lock (#62): it reads the usage and the count
/// in one statement and adds their difference, so a create charged
/// between its read and its write keeps its charge — neither lost under an
/// overwrite nor waiting on the recount — and the usage ends exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_charged_during_a_recount_keeps_its_charge() {
    let db = Db::new().await;
    tickler_testkit::token_create(&db.url, "tenant", &["*"], &["write"]).await;
    sqlx::query("UPDATE api_tokens SET max_pending_jobs = 100 WHERE name = 'tenant'")
        .execute(&db.sql)
        .await
        .unwrap();
    let token: u64 = sqlx::query_scalar("SELECT id FROM api_tokens WHERE name = 'tenant'")
        .fetch_one(&db.sql)
        .await
        .unwrap();
    let tenant = db.store_as(Actor::Api).with_quota(Some(token));
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            tenant
                .job_insert(&job_new("quota", 3_600_000))
                .await
                .unwrap()
                .0
                .id,
        );
    }
    // One leaves pending by hand: the usage (3) is one more than the count.
    db.edit("UPDATE jobs SET status = 'cancelled' WHERE id = ?", ids[0])
        .await;

    fail::cfg("recount-read", HOLD).unwrap();
    let counter = db.store_as(Actor::Api);
    let recount = tokio::spawn(async move { counter.quota_recount(token).await });
    tokio::time::sleep(EDIT_AFTER).await;
    tenant
        .job_insert(&job_new("quota", 3_600_000))
        .await
        .unwrap();
    let usage = recount.await.unwrap().unwrap();
    fail::remove("recount-read");

    assert_eq!(
        usage.pending_jobs, 3,
        "two left of the three, and the one created meanwhile"
    );
    let again = db.store.quota_recount(token).await.unwrap();
    assert_eq!(
        again.pending_jobs, 3,
        "a recount with nothing new changes nothing"
    );
    db.finish().await;
}
