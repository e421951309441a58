//! Recurring schedules against the real services: occurrences are jobs
//! created ahead with deterministic keys, produced once each across two
//! instances and a restart; misfires follow the schedule's policy when
//! tickler was stopped across three occurrences; long horizons hold one
//! row and nothing in Redis; PATCH, pause, resume and DELETE follow
//! docs/schedules.md; the preview applies the time-zone rules.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tickler::roles::service::Service;
use tickler_testkit::{eventually, records_read, Record, TestEnv};

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

/// The occurrence instant in a record's key (`<key>@<instant>`).
fn instant_of(record: &Record) -> DateTime<Utc> {
    let key = record.key.as_deref().expect("a keyed record");
    at(key.rsplit_once('@').expect("key@instant").1)
}

async fn create(env: &TestEnv, body: Value) -> Value {
    let mut body = body;
    body["topic"] = json!(env.topic);
    let (status, schedule) = env.post("/v1/schedules", body).await;
    assert_eq!(status, 201, "{schedule}");
    schedule
}

/// (instant, status, dispatched?) of every occurrence of `schedule`, by
/// instant.
async fn occurrences(env: &TestEnv, schedule: u64) -> Vec<(DateTime<Utc>, String, bool)> {
    let rows: Vec<(Vec<u8>, String, Option<chrono::NaiveDateTime>)> = sqlx::query_as(
        "SELECT job_key, CAST(status AS CHAR), dispatched_at FROM jobs WHERE schedule_id = ?",
    )
    .bind(schedule)
    .fetch_all(&env.sql)
    .await
    .unwrap();
    let mut out: Vec<_> = rows
        .into_iter()
        .map(|(key, status, dispatched)| {
            let key = String::from_utf8(key).unwrap();
            (
                at(key.rsplit_once('@').unwrap().1),
                status,
                dispatched.is_some(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Reads records until `n` came or `wait` passed; asserts each occurrence
/// came once and they follow each other every `every_ms`, without a gap.
fn assert_consecutive(records: &[Record], every_ms: i64) {
    let mut instants: Vec<DateTime<Utc>> = records.iter().map(instant_of).collect();
    instants.sort();
    let mut seen = BTreeMap::new();
    for instant in &instants {
        *seen.entry(*instant).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "occurrences produced twice: {twice:?}");
    for pair in instants.windows(2) {
        assert_eq!(
            (pair[1] - pair[0]).num_milliseconds(),
            every_ms,
            "a gap or an extra between {} and {}",
            pair[0],
            pair[1]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn occurrences_are_jobs_produced_once_each_on_time() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let schedule = create(
        &env,
        json!({"key": "tick", "every_ms": 1000, "payload": {"plan": "gold"}, "headers": {"source": "test"}}),
    )
    .await;
    let id = schedule["id"].as_u64().unwrap();
    assert_eq!(schedule["status"], "active");
    let pending = schedule["pending"].as_array().unwrap();
    assert!(
        !pending.is_empty(),
        "the next occurrence exists as a job: {schedule}"
    );
    let first_job = pending[0]["job_id"].as_u64().unwrap();
    let (status, job) = env.get(&format!("/v1/jobs/{first_job}")).await;
    assert_eq!(status, 200);
    assert_eq!(job["schedule_id"], id, "{job}");
    assert!(job["key"].as_str().unwrap().starts_with("tick@"));

    let records = records_read(&consumer, 5, Duration::from_secs(30)).await;
    assert_eq!(records.len(), 5, "five occurrences in 30 s");
    assert_consecutive(&records, 1000);
    for record in &records {
        assert_eq!(
            record.header("tickler-schedule-id"),
            Some(id.to_string().as_str())
        );
        assert_eq!(record.header("source"), Some("test"));
        assert_eq!(record.payload, br#"{"plan":"gold"}"#);
        let scheduled: i64 = record
            .header("tickler-scheduled-at")
            .unwrap()
            .parse()
            .unwrap();
        let dispatched: i64 = record
            .header("tickler-dispatched-at")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(scheduled, instant_of(record).timestamp_millis());
        assert!(dispatched >= scheduled, "never early");
    }
    let (_, after) = env.get(&format!("/v1/schedules/{id}")).await;
    assert!(after["occurrences"].as_u64().unwrap() >= 5, "{after}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_and_a_restart_neither_repeat_nor_skip_an_occurrence() {
    let mut env = TestEnv::start().await;
    let second = env.another().await;
    let consumer = env.consumer();
    // Every second, on Sydney's clock: both instances run the materializer.
    create(
        &env,
        json!({"key": "both", "cron": "* * * * * *", "time_zone": "Australia/Sydney"}),
    )
    .await;
    let mut records = records_read(&consumer, 4, Duration::from_secs(20)).await;
    // A restart of one instance mid-schedule (shorter than the grace).
    env.restart().await;
    records.extend(records_read(&consumer, 4, Duration::from_secs(20)).await);
    second.shutdown().await;
    records.extend(records_read(&consumer, 3, Duration::from_secs(20)).await);
    assert!(records.len() >= 11, "{} records", records.len());
    assert_consecutive(&records, 1000);
    let duplicates: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) - COUNT(DISTINCT job_key) FROM jobs WHERE schedule_id IS NOT NULL",
    )
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!(duplicates, 0);
    env.finish().await;
}

/// Stops tickler across three occurrences of three schedules (every 4 s,
/// grace 1 s), one per misfire policy, and looks at what each produced for
/// the occurrences that fell in the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfires_follow_each_schedules_policy() {
    let mut env = TestEnv::start_with(|c| c.schedules.lookahead_ms = 0).await;
    let now = env.store.db_now().await.unwrap();
    // Aligned on whole seconds a little ahead, so all three share instants.
    let start = DateTime::from_timestamp(now.timestamp() + 3, 0).unwrap();
    let mut ids = BTreeMap::new();
    for policy in ["skip", "fire_once", "fire_all"] {
        let schedule = create(
            &env,
            json!({"key": format!("m-{policy}"), "every_ms": 4000, "start_at": start.to_rfc3339(),
                   "misfire": policy, "misfire_grace_ms": 1000}),
        )
        .await;
        ids.insert(policy, schedule["id"].as_u64().unwrap());
    }
    // The first occurrence is produced for all three, and the next one
    // created as a job; then stop.
    let first = start;
    let second_at = first + chrono::Duration::seconds(4);
    for id in ids.values() {
        let id = *id;
        eventually(Duration::from_secs(20), || async {
            let occ = occurrences(&env, id).await;
            let produced = occ.iter().any(|(at, _, done)| *at == first && *done);
            let next_created = occ.iter().any(|(at, _, _)| *at == second_at);
            (produced && next_created).then_some(())
        })
        .await
        .expect("the first occurrence is produced and the next one created");
    }
    env.stop().await;
    // Down across first+4, +8 and +12; back between +13 and +17.
    let back_at = first + chrono::Duration::milliseconds(13_500);
    let wait = (back_at - Utc::now()).num_milliseconds().max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    env.restart().await;
    let missed: Vec<_> = [4, 8, 12]
        .iter()
        .map(|s| first + chrono::Duration::seconds(*s))
        .collect();
    let next = first + chrono::Duration::seconds(16);
    // Wait until the occurrence after the outage is produced everywhere.
    for id in ids.values() {
        let id = *id;
        eventually(Duration::from_secs(20), || async {
            let occ = occurrences(&env, id).await;
            occ.iter()
                .any(|(at, _, done)| *at == next && *done)
                .then_some(())
        })
        .await
        .unwrap_or_else(|| panic!("schedule {id} goes on after the outage"));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let produced_in_outage = |occ: &[(DateTime<Utc>, String, bool)]| -> Vec<DateTime<Utc>> {
        occ.iter()
            .filter(|(at, _, done)| missed.contains(at) && *done)
            .map(|(at, _, _)| *at)
            .collect()
    };
    let skip = occurrences(&env, ids["skip"]).await;
    assert_eq!(
        produced_in_outage(&skip),
        Vec::<DateTime<Utc>>::new(),
        "skip: none; {skip:?}"
    );
    assert!(
        skip.iter()
            .any(|(at, status, _)| *at == missed[0] && status == "expired"),
        "skip: the occurrence created before the outage expired: {skip:?}"
    );
    let once = occurrences(&env, ids["fire_once"]).await;
    assert_eq!(
        produced_in_outage(&once).len(),
        1,
        "fire_once: one; {once:?}"
    );
    let all = occurrences(&env, ids["fire_all"]).await;
    assert_eq!(
        produced_in_outage(&all),
        missed,
        "fire_all: each, in order; {all:?}"
    );
    // By created_at: ids are no time order (each process's handles take
    // ids from blocks of their own).
    let created_in_order: Vec<chrono::NaiveDateTime> = sqlx::query_scalar(
        "SELECT created_at FROM jobs WHERE schedule_id = ? ORDER BY schedule_time",
    )
    .bind(ids["fire_all"])
    .fetch_all(&env.sql)
    .await
    .unwrap();
    let mut sorted = created_in_order.clone();
    sorted.sort();
    assert_eq!(
        created_in_order, sorted,
        "created in the order of their instants"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monthly_schedule_for_years_holds_one_row_and_nothing_in_redis() {
    let env = TestEnv::start().await;
    let schedule = create(
        &env,
        json!({"key": "renewal-42", "cron": "0 9 1 * *", "time_zone": "Europe/Berlin",
               "end_at": "2036-01-01T00:00:00Z", "misfire": "skip"}),
    )
    .await;
    let id = schedule["id"].as_u64().unwrap();
    // A few passes of the materializer, then one of the loader.
    let mut materializer = tickler::roles::materializer::Materializer::new(
        env.store.clone(),
        env.index.clone(),
        tickler::roles::materializer::MaterializerConfig::from_config(&env.config),
        std::sync::Arc::new(tokio::sync::Notify::new()),
    );
    let mut created = Vec::new();
    for _ in 0..3 {
        created.push(
            materializer
                .run_once(chrono::Utc::now())
                .await
                .unwrap()
                .created,
        );
    }
    // The API's create made the first occurrence; passes make no more
    // while the next one is a month away.
    assert_eq!(created, [0, 0, 0], "a pass creates nothing a month ahead");
    let now = env.store.db_now().await.unwrap();
    env.loader().run_once(now).await.unwrap();
    let rows: Vec<u64> = sqlx::query_scalar("SELECT id FROM jobs WHERE schedule_id = ?")
        .bind(id)
        .fetch_all(&env.sql)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "only the next occurrence exists");
    assert!(
        !env.redis_holds(rows[0]).await,
        "a month ahead: not in Redis"
    );
    let (_, job) = env.get(&format!("/v1/jobs/{}", rows[0])).await;
    let run_at = at(job["run_at"].as_str().unwrap());
    let local = run_at.with_timezone(&chrono_tz::Europe::Berlin);
    assert_eq!(local.format("%d %H:%M").to_string(), "01 09:00", "{job}");
    assert!(
        job["expires_at"].is_string(),
        "a skip occurrence expires: {job}"
    );
    let (_, after) = env.get(&format!("/v1/schedules/{id}")).await;
    assert!(at(after["next_at"].as_str().unwrap()) > run_at);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_pause_resume_and_delete_a_schedule() {
    let env = TestEnv::start().await;
    let start = Utc::now() + chrono::Duration::hours(1);
    let schedule = create(
        &env,
        json!({"key": "plan", "every_ms": 3_600_000, "start_at": start.to_rfc3339(), "payload": 1}),
    )
    .await;
    let id = schedule["id"].as_u64().unwrap();
    let job_id = schedule["pending"][0]["job_id"].as_u64().unwrap();
    let path = format!("/v1/schedules/{id}");

    // The same request again: the same schedule; a different one: 409.
    let (status, again) = env
        .post("/v1/schedules", json!({"topic": env.topic, "key": "plan", "every_ms": 3_600_000, "start_at": start.to_rfc3339(), "payload": 1}))
        .await;
    assert_eq!((status, again["id"].as_u64()), (200, Some(id)), "{again}");
    let (status, conflict) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "plan", "every_ms": 60_000}),
        )
        .await;
    assert_eq!(
        (status, conflict["error"]["code"].as_str()),
        (409, Some("key_conflict"))
    );

    // Payload only: the pending occurrence is updated in place.
    let (status, changed) = env
        .request(
            "PATCH",
            &path,
            Some(json!({"version": 1, "payload": 2}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["updated"], 1);
    assert_eq!(changed["replaced"], 0);
    let (_, job) = env.get(&format!("/v1/jobs/{job_id}")).await;
    assert_eq!(job["payload"], 2);
    // A stale version is refused.
    let (status, stale) = env
        .request(
            "PATCH",
            &path,
            Some(json!({"version": 1, "payload": 3}).to_string()),
        )
        .await;
    assert_eq!(
        (status, stale["error"]["code"].as_str()),
        (409, Some("version_conflict"))
    );

    // New times: the pending occurrence is replaced.
    let (status, changed) = env
        .request(
            "PATCH",
            &path,
            Some(
                json!({"version": 2, "cron": "30 6 * * *", "time_zone": "America/New_York"})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["replaced"], 1);
    assert!(changed["schedule"]["every_ms"].is_null());
    let new_job = changed["schedule"]["pending"][0]["job_id"]
        .as_u64()
        .unwrap();
    assert_ne!(new_job, job_id);
    let (status, _) = env.get(&format!("/v1/jobs/{job_id}")).await;
    assert_eq!(status, 404, "a replaced occurrence that never ran is gone");
    // Its history says where it went: withdrawn by the caller's change.
    let last: (String, String) = sqlx::query_as(
        "SELECT CAST(status AS CHAR), CAST(actor AS CHAR) FROM job_events WHERE job_id = ? ORDER BY id DESC LIMIT 1",
    )
    .bind(job_id)
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!(last.0, "cancelled", "{last:?}");
    assert!(last.1.starts_with("api"), "by the caller: {last:?}");
    let (_, job) = env.get(&format!("/v1/jobs/{new_job}")).await;
    let local = at(job["run_at"].as_str().unwrap()).with_timezone(&chrono_tz::America::New_York);
    assert_eq!(local.format("%H:%M").to_string(), "06:30");

    // Pause: nothing pending; resume: the next one again.
    let (status, paused) = env.post(&format!("{path}/pause"), json!({})).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["schedule"]["status"], "paused");
    assert_eq!(paused["schedule"]["pending"], json!([]));
    let (_, resumed) = env.post(&format!("{path}/resume"), json!({})).await;
    assert_eq!(resumed["schedule"]["status"], "active");
    let resumed_job = resumed["schedule"]["pending"][0]["job_id"]
        .as_u64()
        .unwrap();

    // Delete, keeping nothing: the occurrence never runs.
    let (status, deleted) = env.request("DELETE", &path, None).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["occurrences_cancelled"], 1);
    let (status, _) = env.get(&path).await;
    assert_eq!(status, 404);
    let (status, _) = env.get(&format!("/v1/jobs/{resumed_job}")).await;
    assert_eq!(status, 404);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_occurrence_is_skipped_and_the_schedule_goes_on() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let now = env.store.db_now().await.unwrap();
    let start = DateTime::from_timestamp(now.timestamp() + 4, 0).unwrap();
    let schedule = create(
        &env,
        json!({"key": "c", "every_ms": 2000, "start_at": start.to_rfc3339()}),
    )
    .await;
    let first = schedule["pending"][0]["job_id"].as_u64().unwrap();
    let (status, cancelled) = env
        .request("DELETE", &format!("/v1/jobs/{first}"), None)
        .await;
    assert_eq!(status, 200, "{cancelled}");
    let records = records_read(&consumer, 2, Duration::from_secs(20)).await;
    let instants: Vec<_> = records.iter().map(instant_of).collect();
    assert_eq!(
        instants,
        [
            start + chrono::Duration::seconds(2),
            start + chrono::Duration::seconds(4)
        ],
        "the cancelled first occurrence is not produced; the next ones are"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_applies_the_time_zone_rules_and_bad_timings_are_refused() {
    let env = TestEnv::start().await;
    let (status, preview) = env
        .post(
            "/v1/schedules/preview",
            json!({"cron": "30 2 * * *", "time_zone": "Europe/Berlin",
                   "after": "2027-03-27T12:00:00Z", "count": 2}),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        preview["local"],
        json!([
            "2027-03-28T03:00:00.000+02:00",
            "2027-03-29T02:30:00.000+02:00"
        ]),
        "spring forward: the skipped 02:30 fires at 03:00"
    );
    let (_, preview) = env
        .post(
            "/v1/schedules/preview",
            json!({"cron": "30 2 * * *", "time_zone": "Europe/Berlin",
                   "after": "2027-10-30T12:00:00Z", "count": 2}),
        )
        .await;
    assert_eq!(
        preview["occurrences"],
        json!(["2027-10-31T00:30:00.000Z", "2027-11-01T01:30:00.000Z"]),
        "fall back: the repeated 02:30 fires once, at its first occurrence"
    );
    for (body, code) in [
        (json!({"key": "x", "cron": "* * *"}), "invalid_schedule"),
        (
            json!({"key": "x", "cron": "0 9 * * *", "time_zone": "Mars/Base"}),
            "invalid_schedule",
        ),
        (json!({"key": "x", "every_ms": 10}), "invalid_schedule"),
        (
            json!({"key": "x", "every_ms": 100_000_000_000_000_000u64}),
            "invalid_schedule",
        ),
        (
            json!({"key": "x", "cron": format!("{every} {every} * * * *", every = (0..60).map(|n| n.to_string()).collect::<Vec<_>>().join(","))}),
            "invalid_schedule",
        ),
        (
            json!({"key": "x", "cron": "0 0 30 2 *"}),
            "invalid_schedule",
        ),
        (json!({"key": "x"}), "invalid_schedule"),
        (json!({"every_ms": 1000}), "invalid_schedule"),
        (json!({"key": "a@b", "every_ms": 1000}), "invalid_schedule"),
        (
            json!({"key": "x", "every_ms": 1000, "misfire": "sometimes"}),
            "invalid_request",
        ),
        (
            json!({"key": "x", "every_ms": 1000, "end_at": "2000-01-01T00:00:00Z", "start_at": "2001-01-01T00:00:00Z"}),
            "invalid_schedule",
        ),
    ] {
        let mut body = body;
        body["topic"] = json!(env.topic);
        let (status, answer) = env.post("/v1/schedules", body.clone()).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some(code)),
            "{body} -> {answer}"
        );
    }
    let (status, answer) = env
        .post(
            "/v1/schedules/preview",
            json!({"every_ms": 100_000_000_000_000_000u64}),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_schedule"))
    );
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM schedules")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(count, 0, "nothing written for bad input");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_in_the_past_sets_the_phase_not_a_backlog() {
    let env = TestEnv::start().await;
    let now = env.store.db_now().await.unwrap();
    let start = DateTime::from_timestamp(now.timestamp() - 3_600, 500_000_000).unwrap();
    let schedule = create(
        &env,
        json!({"key": "phase", "every_ms": 60_000, "start_at": start.to_rfc3339(), "misfire": "fire_all"}),
    )
    .await;
    let id = schedule["id"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let occ = occurrences(&env, id).await;
    // The next one (and one more if that is within the 10 s lookahead).
    assert!(
        occ.len() <= 2,
        "no hour of misfires for a schedule just made: {occ:?}"
    );
    assert!(
        occ.iter().all(|(at, _, _)| *at > now),
        "none before it was made: {occ:?}"
    );
    let (first, _, _) = occ[0];
    assert_eq!(
        first.timestamp_subsec_millis(),
        500,
        "in phase with start_at"
    );
    assert_eq!((first - start).num_milliseconds() % 60_000, 0);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_occurrence_moved_on_purpose_runs_at_its_new_time() {
    let env = TestEnv::start().await;
    let start = Utc::now() + chrono::Duration::hours(1);
    let schedule = create(
        &env,
        json!({"key": "moved", "every_ms": 3_600_000, "start_at": start.to_rfc3339(),
               "misfire": "skip", "misfire_grace_ms": 1000}),
    )
    .await;
    let job_id = schedule["pending"][0]["job_id"].as_u64().unwrap();
    let (_, job) = env.get(&format!("/v1/jobs/{job_id}")).await;
    assert!(job["expires_at"].is_string(), "{job}");
    // Its grace over (as after an outage), then moved on purpose: the move
    // clears expires_at, so it runs at its new time instead of expiring.
    sqlx::query("UPDATE jobs SET expires_at = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND WHERE id = ?")
        .bind(job_id)
        .execute(&env.sql)
        .await
        .unwrap();
    let (_, job) = env.get(&format!("/v1/jobs/{job_id}")).await;
    let (status, moved) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{job_id}"),
            Some(json!({"version": job["version"], "delay_ms": 500}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{moved}");
    assert!(
        moved.get("expires_at").is_none(),
        "a move clears it: {moved}"
    );
    env.status_await(job_id, "dispatched", Duration::from_secs(15))
        .await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_a_schedule_keeps_a_retry_of_an_occurrence_already_produced() {
    let env = TestEnv::start().await;
    let now = env.store.db_now().await.unwrap();
    let start = DateTime::from_timestamp(now.timestamp() + 2, 0).unwrap();
    let schedule = create(
        &env,
        json!({"key": "retried", "every_ms": 3_600_000, "start_at": start.to_rfc3339(),
               "expects_result": true, "max_attempts": 3}),
    )
    .await;
    let id = schedule["id"].as_u64().unwrap();
    let job_id = schedule["pending"][0]["job_id"].as_u64().unwrap();
    env.status_await(job_id, "dispatched", Duration::from_secs(15))
        .await;
    // The consumer asks for a retry in a minute: pending again, attempt 2.
    let (status, report) = env
        .post(
            &format!("/v1/jobs/{job_id}/result"),
            json!({"attempt": 1, "outcome": "retry", "retry_after_ms": 60_000}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    let (status, paused) = env
        .post(&format!("/v1/schedules/{id}/pause"), json!({}))
        .await;
    assert_eq!(status, 200, "{paused}");
    let (status, job) = env.get(&format!("/v1/jobs/{job_id}")).await;
    assert_eq!(
        status, 200,
        "a retry of a produced occurrence is not deleted: {job}"
    );
    assert_eq!(
        (job["status"].as_str(), job["attempt"].as_u64()),
        (Some("pending"), Some(2))
    );
    env.finish().await;
}

/// A schedule PATCH (here: a new payload) leaves an occurrence someone
/// moved on purpose alone: its expiry is not armed again, so it still runs
/// at the time it was moved to, however late — while an occurrence still at
/// its own instant keeps its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_patch_does_not_rearm_expiry_on_a_moved_occurrence() {
    let env = TestEnv::start().await;
    // Two occurrences within the materializer's lookahead (10 s).
    let start = Utc::now() + chrono::Duration::seconds(6);
    let schedule = create(
        &env,
        json!({"key": "rearm", "every_ms": 2_000, "start_at": start.to_rfc3339(),
               "misfire": "skip", "misfire_grace_ms": 1000}),
    )
    .await;
    let schedule_id = schedule["id"].as_u64().unwrap();
    let pending: Vec<u64> = schedule["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["job_id"].as_u64().unwrap())
        .collect();
    assert!(pending.len() >= 2, "{schedule}");
    let (moved_id, kept_id) = (pending[0], pending[1]);
    let (_, job) = env.get(&format!("/v1/jobs/{moved_id}")).await;
    let (status, moved) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{moved_id}"),
            Some(json!({"version": job["version"], "delay_ms": 7_200_000}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{moved}");
    let (status, changed) = env
        .request(
            "PATCH",
            &format!("/v1/schedules/{schedule_id}"),
            Some(json!({"version": schedule["version"], "payload": {"new": true}}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    let (_, moved) = env.get(&format!("/v1/jobs/{moved_id}")).await;
    assert_eq!(moved["payload"], json!({"new": true}), "updated in place");
    assert!(
        moved.get("expires_at").is_none(),
        "the moved occurrence keeps its new time without expiry: {moved}"
    );
    let (_, kept) = env.get(&format!("/v1/jobs/{kept_id}")).await;
    assert!(kept["expires_at"].is_string(), "{kept}");
    env.finish().await;
}

/// An ordinary job cannot take a key of the occurrence form: on the same
/// topic it would make the occurrence's insert a silent duplicate and the
/// occurrence would never be created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cannot_take_an_occurrences_key() {
    let env = TestEnv::start().await;
    let (status, reply) = env
        .post(
            "/v1/jobs",
            json!({"topic": env.topic, "key": "member-42@2027-03-01T08:00:00.000Z",
                   "payload": 1, "delay_ms": 60_000}),
        )
        .await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (400, Some("invalid_key")),
        "{reply}"
    );
    assert_eq!(env.jobs_count().await, 0, "nothing written");
    let (status, _) = env
        .post(
            "/v1/jobs",
            json!({"topic": env.topic, "key": "member-42@example.com", "payload": 1,
                   "delay_ms": 60_000}),
        )
        .await;
    assert_eq!(status, 201, "an '@' alone is fine");
    env.finish().await;
}

/// `jitter_ms` and `window_ms` on a schedule: its occurrence's job runs up
/// to the jitter after the schedule's instant, with the window from there,
/// and the instant decided in it; a bad value is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedules_jitter_and_window_place_its_occurrences() {
    let env = TestEnv::start().await;
    let start = Utc::now() + chrono::Duration::hours(1);
    let schedule = create(
        &env,
        json!({"key": "spread", "every_ms": 3_600_000, "start_at": start.to_rfc3339(),
               "jitter_ms": 60_000, "window_ms": 120_000}),
    )
    .await;
    assert_eq!(
        (
            schedule["jitter_ms"].as_u64(),
            schedule["window_ms"].as_u64()
        ),
        (Some(60_000), Some(120_000))
    );
    let job_id = schedule["pending"][0]["job_id"].as_u64().unwrap();
    let (_, job) = env.get(&format!("/v1/jobs/{job_id}")).await;
    let run_at = at(job["run_at"].as_str().unwrap());
    let produce_at = at(job["produce_at"].as_str().unwrap());
    let instant = at(&tickler::domain::job::time_format(
        tickler::domain::job::truncate_to_ms(start),
    ));
    assert!(
        // the jitter keeps its last tenth, at most a second, free: 59 s here
        run_at >= instant && run_at <= instant + chrono::Duration::seconds(59),
        "jittered: {job}"
    );
    assert_eq!(job["window_ms"], 120_000);
    assert!(
        produce_at >= run_at && produce_at <= run_at + chrono::Duration::seconds(120),
        "{job}"
    );
    let (status, refused) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "too-wide", "every_ms": 60_000, "jitter_ms": 86_400_001}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_schedule");
    env.finish().await;
}
