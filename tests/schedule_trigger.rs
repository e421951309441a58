//! Occurrences a person asks for (#60), against the real services: a
//! trigger creates one more occurrence now, under its own key, produced to
//! the schedule's topic with its payload and headers, idempotent on a
//! given key, left alone by a pause; a backfill previews without writing,
//! then creates exactly the nominal occurrences of a past interval that
//! have no job — with the keys the materializer gives them — and, run
//! again, nothing. Bad intervals and unknown schedules are refused and
//! write nothing.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tickler::domain::job::time_format;
use tickler::domain::schedule::occurrence_key;
use tickler_testkit::{
    eventually, http_with_token, output, records_read, records_read_keys, token_create, TestEnv,
};

/// The job holding (topic, key), once it exists.
async fn job_by_key(env: &TestEnv, key: &str) -> u64 {
    eventually(Duration::from_secs(20), || async {
        sqlx::query_scalar::<_, u64>("SELECT id FROM jobs WHERE topic = ? AND job_key = ?")
            .bind(&env.topic)
            .bind(key.as_bytes())
            .fetch_optional(&env.sql)
            .await
            .unwrap()
    })
    .await
    .unwrap_or_else(|| panic!("a job keyed {key} is created"))
}

/// Moves `tickler dev`'s clock so that the database reads `target` (a
/// moment after it, by the time the move lands).
async fn clock_to(env: &TestEnv, target: DateTime<Utc>) {
    let now = env.store.db_now().await.unwrap();
    let ms = (target - now).num_milliseconds();
    assert!(ms > 0, "{target} is not ahead of {now}");
    let (status, clock) = env.post("/v1/dev/clock", json!({"advance_ms": ms})).await;
    assert_eq!(status, 200, "{clock}");
}

/// What a refused request must not write: jobs, the schedule's version.
async fn written(env: &TestEnv, id: u64) -> (i64, u32) {
    let version: u32 = sqlx::query_scalar("SELECT version FROM schedules WHERE id = ?")
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap();
    (env.jobs_count().await, version)
}

/// Hourly, first in an hour: a trigger runs now, with the schedule's
/// payload, headers and policy and a key of its own.
///
/// Long because it is one story told in order: trigger, trigger with a
/// key (twice), a trigger for later and a pause, a trigger while paused,
/// then what is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_creates_one_occurrence_now_under_its_own_key_idempotent_on_a_given_one() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let now = env.store.db_now().await.unwrap();
    let start = now + chrono::Duration::hours(1);
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "report", "every_ms": 3_600_000,
                   "start_at": start.to_rfc3339(), "payload": {"report": "daily"},
                   "headers": {"tenant": "acme"}, "max_attempts": 7}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_u64().unwrap();
    let wait = Duration::from_secs(20);

    // No body: now, under `report@trigger-<hex>`.
    let (status, job) = env
        .request("POST", &format!("/v1/schedules/{id}/trigger"), None)
        .await;
    assert_eq!(status, 201, "{job}");
    let key = job["key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("report@trigger-"), "{job}");
    assert_eq!(job["schedule_id"], id, "{job}");
    assert_eq!(job["max_attempts"], 7, "{job}");
    let triggered = job["id"].as_u64().unwrap();

    // A given key: created once, answered again.
    let (status, keyed) = env
        .post(
            &format!("/v1/schedules/{id}/trigger"),
            json!({"key": "report-rerun-1"}),
        )
        .await;
    assert_eq!(status, 201, "{keyed}");
    let (status, again) = env
        .post(
            &format!("/v1/schedules/{id}/trigger"),
            json!({"key": "report-rerun-1"}),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["id"], keyed["id"], "the same job: {again}");

    // Both produced to the topic, each under its key, with the schedule's
    // payload and headers.
    env.status_await(triggered, "dispatched", wait).await;
    env.status_await(keyed["id"].as_u64().unwrap(), "dispatched", wait)
        .await;
    let records = records_read(&consumer, 2, wait).await;
    let mut keys: Vec<&str> = records.iter().filter_map(|r| r.key.as_deref()).collect();
    keys.sort();
    let mut expected = [key.as_str(), "report-rerun-1"];
    expected.sort();
    assert_eq!(keys, expected);
    for record in &records {
        let payload: Value = serde_json::from_slice(&record.payload).unwrap();
        assert_eq!(payload, json!({"report": "daily"}));
        assert_eq!(record.header("tenant"), Some("acme"));
    }

    // A trigger for later is left alone by a pause (the nominal occurrence
    // is not); a paused schedule is triggered too.
    let (status, later) = env
        .post(
            &format!("/v1/schedules/{id}/trigger"),
            json!({"key": "report-later", "delay_ms": 1_800_000}),
        )
        .await;
    assert_eq!(status, 201, "{later}");
    let nominal = job_by_key(&env, &occurrence_key("report", start)).await;
    let (status, paused) = env
        .post(&format!("/v1/schedules/{id}/pause"), json!({}))
        .await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["replaced"], 1, "the nominal one only: {paused}");
    assert_eq!(
        env.jobs_count().await,
        3,
        "{nominal} deleted, the rest kept"
    );
    assert_eq!(
        env.job_status(later["id"].as_u64().unwrap()).await,
        "pending"
    );
    let (status, while_paused) = env
        .post(&format!("/v1/schedules/{id}/trigger"), json!({}))
        .await;
    assert_eq!(status, 201, "{while_paused}");

    // Refused, writing nothing: an occurrence's key, a key another job
    // holds, an unknown field, an unknown schedule, and a token that may
    // not see the schedule's topic (404, as if it did not exist).
    env.job_create(json!({"topic": env.topic, "key": "plain", "payload": 1, "delay_ms": 600_000}))
        .await;
    let before = written(&env, id).await;
    for (body, status_code, code) in [
        (
            json!({"key": occurrence_key("report", start)}),
            400,
            "invalid_key",
        ),
        (json!({"key": "plain"}), 409, "key_conflict"),
        (json!({"when": "now"}), 400, "invalid_request"),
    ] {
        let (status, answer) = env
            .post(&format!("/v1/schedules/{id}/trigger"), body.clone())
            .await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (status_code, Some(code)),
            "{body}: {answer}"
        );
    }
    let (status, answer) = env.post("/v1/schedules/987654/trigger", json!({})).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let other = format!("{}-other", env.topic);
    let secret = token_create(&env.config.mysql.url, "elsewhere", &[&other], &["write"]).await;
    let (status, answer) = env
        .request_with(
            &http_with_token(&secret),
            "POST",
            &format!("/v1/schedules/{id}/trigger"),
            Some("{}".to_owned()),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    assert_eq!(written(&env, id).await, before, "refusals write nothing");

    // `tickler schedules trigger`: the job, as JSON.
    let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
    command.args([
        "schedules",
        "trigger",
        &id.to_string(),
        "--key",
        "from-cli",
        "--json",
    ]);
    let printed = output(command).await;
    assert!(printed.status.success(), "{printed:?}");
    let job: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(
        (job["key"].as_str(), &job["schedule_id"]),
        (Some("from-cli"), &json!(id))
    );
    env.finish().await;
}

/// Every minute, `misfire: skip`, on a clock the test moves: o0 produced,
/// o1 created then expired, o2..o9 skipped while the clock jumped onto
/// o10. A
/// backfill of [o0, o10) previews 8 and writes nothing; applied, creates
/// o2..o9 under their nominal keys, produced at once with their nominal
/// time as `tickler-scheduled-at`; run again, creates nothing.
///
/// Long because it is one story told in order, then the refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_creates_exactly_the_missing_occurrences_of_a_past_interval_once() {
    let env = TestEnv::start_dev_with(|c| c.schedules.lookahead_ms = 0).await;
    let consumer = env.consumer();
    let now = env.store.db_now().await.unwrap();
    let start = DateTime::from_timestamp(now.timestamp() + 2, 0).unwrap();
    let o = |k: i64| start + chrono::Duration::minutes(k);
    // Its phase set eight days back: the interval of the too-many check.
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "tick", "every_ms": 60_000,
                   "start_at": (start - chrono::Duration::days(8)).to_rfc3339(),
                   "misfire": "skip", "misfire_grace_ms": 10_000, "payload": {"tick": true}}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_u64().unwrap();
    let wait = Duration::from_secs(20);
    let first = job_by_key(&env, &occurrence_key("tick", o(0))).await;
    env.status_await(first, "dispatched", wait).await;
    let second = job_by_key(&env, &occurrence_key("tick", o(1))).await;
    clock_to(&env, o(10) + chrono::Duration::seconds(1)).await;
    env.status_await(second, "expired", wait).await;

    let path = format!("/v1/schedules/{id}/backfill");
    let interval = json!({"from": time_format(o(0)), "to": time_format(o(10))});
    let missing: Vec<String> = (2..10).map(|k| time_format(o(k))).collect();

    // The preview (the default): eight to create, two existing; nothing
    // written.
    let before = written(&env, id).await;
    let (status, preview) = env.post(&path, interval.clone()).await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        (
            &preview["dry_run"],
            &preview["expected"],
            &preview["created"],
            &preview["existing"]
        ),
        (&json!(true), &json!(10), &json!(8), &json!(2)),
        "{preview}"
    );
    assert_eq!(preview["preview"], json!(missing), "{preview}");
    assert_eq!(written(&env, id).await, before, "a preview writes nothing");

    // Applied: o2..o9, under the materializer's keys, due at once.
    let mut apply = interval.clone();
    apply["dry_run"] = json!(false);
    let (status, applied) = env.post(&path, apply.clone()).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(
        (
            &applied["dry_run"],
            &applied["created"],
            &applied["existing"]
        ),
        (&json!(false), &json!(8), &json!(2)),
        "{applied}"
    );
    assert_eq!(applied["preview"], json!(missing), "{applied}");
    // o0, o2..o9, and o10 (due as the clock landed).
    let records = records_read_keys(&consumer, 10, wait).await;
    for k in 2..10 {
        let key = occurrence_key("tick", o(k));
        let record = records
            .iter()
            .find(|r| r.key.as_deref() == Some(key.as_str()))
            .unwrap_or_else(|| panic!("a record for {key}"));
        assert_eq!(
            record.header("tickler-scheduled-at"),
            Some(o(k).timestamp_millis().to_string().as_str()),
            "{key}: its nominal time"
        );
        let job = job_by_key(&env, &key).await;
        let schedule_id: Option<u64> =
            sqlx::query_scalar("SELECT schedule_id FROM jobs WHERE id = ?")
                .bind(job)
                .fetch_one(&env.sql)
                .await
                .unwrap();
        assert_eq!(schedule_id, Some(id));
    }
    let second_records = records
        .iter()
        .filter(|r| r.key.as_deref() == Some(occurrence_key("tick", o(1)).as_str()))
        .count();
    assert_eq!(second_records, 0, "the expired one is left alone");

    // Again: nothing new.
    let jobs = env.jobs_count().await;
    let (status, rerun) = env.post(&path, apply).await;
    assert_eq!(status, 200, "{rerun}");
    assert_eq!(
        (&rerun["created"], &rerun["existing"], &rerun["preview"]),
        (&json!(0), &json!(10), &json!([])),
        "{rerun}"
    );
    assert_eq!(env.jobs_count().await, jobs);

    // The audit agrees: o2..o9 are jobs now.
    let range = format!("from={}&to={}", time_format(o(0)), time_format(o(10)));
    let (status, audit) = env.get(&format!("/v1/schedules/{id}/audit?{range}")).await;
    assert_eq!(status, 200, "{audit}");
    for k in 2..10 {
        assert!(
            audit["occurrences"][k]["job_id"].is_u64(),
            "o{k}: {}",
            audit["occurrences"][k]
        );
    }

    cli_previews_and_applies(&env, id, o(11), o(13)).await;
    bad_backfills_are_refused_and_write_nothing(&env, id, start).await;
    env.finish().await;
}

/// `tickler schedules backfill`: a preview without --apply, created with.
/// The interval [o11, o13) holds o11, which exists (created as the next
/// one once o10 was due), and o12, which the clock moved past with nothing
/// creating it.
async fn cli_previews_and_applies(env: &TestEnv, id: u64, from: DateTime<Utc>, to: DateTime<Utc>) {
    clock_to(env, to + chrono::Duration::seconds(30)).await;
    let run = |apply: bool| {
        let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
        command.args([
            "schedules",
            "backfill",
            &id.to_string(),
            "--from",
            &time_format(from),
            "--to",
            &time_format(to),
        ]);
        if apply {
            command.arg("--apply");
        }
        output(command)
    };
    let jobs = env.jobs_count().await;
    let preview = run(false).await;
    assert!(preview.status.success(), "{preview:?}");
    let text = String::from_utf8_lossy(&preview.stdout);
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with("2 expected, 1 existing, 1 to create (a preview: --apply creates them)"),
        "{text}"
    );
    assert_eq!(env.jobs_count().await, jobs);
    let applied = run(true).await;
    assert!(applied.status.success(), "{applied:?}");
    let text = String::from_utf8_lossy(&applied.stdout);
    assert!(
        text.lines().next().unwrap().ends_with("1 created"),
        "{text}"
    );
    assert!(
        text.contains(&time_format(from + chrono::Duration::minutes(1))),
        "{text}"
    );
    job_by_key(
        env,
        &occurrence_key("tick", to - chrono::Duration::minutes(1)),
    )
    .await;
}

/// `from` not before `to`, a `to` in the future, an interval of more than
/// 10,000 occurrences, a missing end, an unknown field: 400; an unknown
/// schedule 404. Nothing is written.
async fn bad_backfills_are_refused_and_write_nothing(env: &TestEnv, id: u64, start: DateTime<Utc>) {
    let before = written(env, id).await;
    let now = env.store.db_now().await.unwrap();
    let at = |t: DateTime<Utc>| Value::from(time_format(t));
    let minute = chrono::Duration::minutes(1);
    for (body, code) in [
        (
            json!({"from": at(now - minute), "to": at(now - minute)}),
            "invalid_interval",
        ),
        (
            json!({"from": at(now - minute), "to": at(now - minute * 2)}),
            "invalid_interval",
        ),
        (
            json!({"from": at(now - minute), "to": at(now + minute), "dry_run": false}),
            "invalid_interval",
        ),
        (
            json!({"from": at(start - chrono::Duration::days(8)), "to": at(start), "dry_run": false}),
            "invalid_interval",
        ),
        (json!({"from": at(now - minute)}), "invalid_interval"),
        (
            json!({"from": at(now - minute * 2), "to": at(now - minute), "apply": true}),
            "invalid_request",
        ),
    ] {
        let (status, answer) = env
            .post(&format!("/v1/schedules/{id}/backfill"), body.clone())
            .await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}: {answer}"
        );
    }
    let (status, answer) = env
        .post(
            "/v1/schedules/987654/backfill",
            json!({"from": at(now - minute * 2), "to": at(now - minute)}),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    assert_eq!(written(env, id).await, before, "refusals write nothing");
}
