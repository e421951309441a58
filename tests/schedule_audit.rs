//! A schedule's fires audited (#59) against the real services, on `tickler
//! dev`'s clock: produced occurrences say where their record went, those
//! of a pause say `paused`, those a misfire policy passed over `skipped`;
//! `tickler schedules audit` prints the same; a bad interval is a 400 that
//! writes nothing.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tickler::domain::job::time_format;
use tickler::domain::schedule::occurrence_key;
use tickler_testkit::{eventually, output, records_read, TestEnv};

/// Moves `tickler dev`'s clock so that the database reads `target` (a
/// moment after it, by the time the move lands).
async fn clock_to(env: &TestEnv, target: DateTime<Utc>) {
    let now = env.store.db_now().await.unwrap();
    let ms = (target - now).num_milliseconds();
    assert!(ms > 0, "{target} is not ahead of {now}");
    let (status, clock) = env.post("/v1/dev/clock", json!({"advance_ms": ms})).await;
    assert_eq!(status, 200, "{clock}");
}

/// The job of the occurrence at `at` of the schedule keyed `audit`, once
/// it exists.
async fn occurrence_job(env: &TestEnv, at: DateTime<Utc>) -> u64 {
    let key = occurrence_key("audit", at);
    eventually(Duration::from_secs(20), || async {
        sqlx::query_scalar::<_, u64>("SELECT id FROM jobs WHERE topic = ? AND job_key = ?")
            .bind(&env.topic)
            .bind(key.as_bytes())
            .fetch_optional(&env.sql)
            .await
            .unwrap()
    })
    .await
    .unwrap_or_else(|| panic!("the occurrence at {at} is created"))
}

/// What an audit writes nothing to: jobs, gaps, the audit log, the
/// schedule's version.
async fn written(env: &TestEnv, id: u64) -> (i64, i64, i64, u32) {
    let count = |table: &'static str| async move {
        sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(&env.sql)
            .await
            .unwrap()
    };
    let version: u32 = sqlx::query_scalar("SELECT version FROM schedules WHERE id = ?")
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap();
    (
        count("jobs").await,
        count("schedule_gaps").await,
        count("audit_log").await,
        version,
    )
}

/// Every minute, `misfire: skip` with a grace of 10 s, on a clock the test
/// moves: o0 and o1 produced; paused across o2 and o3; o4 created at the
/// resume, then the clock jumps past its grace and past o5 and o6, so o4
/// expires and o5, o6 are skipped; o7 produced; o8 to come.
///
/// Long because it is one story told in order: each step sets up the
/// occurrence the audit then reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_tells_produced_paused_and_skipped_occurrences_apart() {
    let env = TestEnv::start_dev_with(|c| c.schedules.lookahead_ms = 0).await;
    let consumer = env.consumer();
    let now = env.store.db_now().await.unwrap();
    let start = DateTime::from_timestamp(now.timestamp() + 2, 0).unwrap();
    let o = |k: i64| start + chrono::Duration::minutes(k);
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "audit", "every_ms": 60_000,
                   "start_at": start.to_rfc3339(), "misfire": "skip", "misfire_grace_ms": 10_000}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_u64().unwrap();
    let wait = Duration::from_secs(20);

    // o0 on time; o1 once the clock is moved onto it.
    let mut produced = vec![occurrence_job(&env, o(0)).await];
    env.status_await(produced[0], "dispatched", wait).await;
    produced.push(occurrence_job(&env, o(1)).await);
    clock_to(&env, o(1) + chrono::Duration::milliseconds(200)).await;
    env.status_await(produced[1], "dispatched", wait).await;

    // Paused across o2 and o3.
    let (status, paused) = env
        .post(&format!("/v1/schedules/{id}/pause"), json!({}))
        .await;
    assert_eq!(status, 200, "{paused}");
    clock_to(&env, o(3) + chrono::Duration::seconds(30)).await;
    let (status, resumed) = env
        .post(&format!("/v1/schedules/{id}/resume"), json!({}))
        .await;
    assert_eq!(status, 200, "{resumed}");

    // o4 is made at the resume; the clock then jumps past its grace and
    // past o5 and o6, which nothing created: their policy skips them.
    let fourth = occurrence_job(&env, o(4)).await;
    clock_to(&env, o(6) + chrono::Duration::seconds(30)).await;
    env.status_await(fourth, "expired", wait).await;
    produced.push(occurrence_job(&env, o(7)).await);
    clock_to(&env, o(7) + chrono::Duration::milliseconds(200)).await;
    env.status_await(produced[2], "dispatched", wait).await;
    let eighth = occurrence_job(&env, o(8)).await;

    let range = format!("from={}&to={}", time_format(o(0)), time_format(o(9)));
    let (status, audit) = env.get(&format!("/v1/schedules/{id}/audit?{range}")).await;
    assert_eq!(status, 200, "{audit}");
    let outcomes: Vec<&str> = audit["occurrences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [
            "produced", "produced", "paused", "paused", "expired", "skipped", "skipped",
            "produced", "upcoming"
        ],
        "{audit}"
    );
    assert_eq!(
        (&audit["expected"], &audit["fired"], &audit["missing"]),
        (&json!(9), &json!(3), &json!(0)),
        "{audit}"
    );
    let at = |k: usize| &audit["occurrences"][k];
    for k in 0..9 {
        assert_eq!(at(k)["expected_at"], time_format(o(k as i64)), "{audit}");
    }
    assert_eq!(at(4)["job_id"], fourth);
    assert_eq!(at(8)["job_id"], eighth);
    for k in [2, 3, 5, 6] {
        assert!(at(k)["job_id"].is_null(), "{audit}");
    }

    // Each produced one where its record is.
    let records = records_read(&consumer, 3, wait).await;
    assert_eq!(records.len(), 3, "three records");
    for (k, job) in [(0, produced[0]), (1, produced[1]), (7, produced[2])] {
        let shown = at(k);
        assert_eq!(shown["job_id"], job, "{shown}");
        let key = occurrence_key("audit", o(k as i64));
        let record = records
            .iter()
            .find(|r| r.key.as_deref() == Some(key.as_str()))
            .unwrap_or_else(|| panic!("a record for {key}"));
        assert_eq!(
            (&shown["partition"], &shown["offset"]),
            (&json!(record.partition), &json!(record.offset)),
            "{shown}"
        );
        assert!(shown["dispatched_at"].is_string(), "{shown}");
    }

    // The gaps behind `paused` and `skipped`: one pause, one run of skips.
    let gaps: Vec<(String, chrono::NaiveDateTime, Option<chrono::NaiveDateTime>)> = sqlx::query_as(
        "SELECT CAST(reason AS CHAR), from_at, to_at FROM schedule_gaps \
             WHERE schedule_id = ? ORDER BY from_at",
    )
    .bind(id)
    .fetch_all(&env.sql)
    .await
    .unwrap();
    assert_eq!(gaps.len(), 2, "{gaps:?}");
    let (pause_from, pause_to) = (gaps[0].1.and_utc(), gaps[0].2.unwrap().and_utc());
    assert_eq!(gaps[0].0, "paused");
    assert!(o(1) < pause_from && pause_from < o(2), "{gaps:?}");
    assert!(o(3) < pause_to && pause_to < o(4), "{gaps:?}");
    assert_eq!(
        (
            gaps[1].0.as_str(),
            gaps[1].1.and_utc(),
            gaps[1].2.map(|t| t.and_utc())
        ),
        ("skipped", o(5), Some(o(6)))
    );

    cli_prints_the_audit(&env, id, &audit).await;
    bad_intervals_are_refused_and_write_nothing(&env, id).await;
    env.finish().await;
}

/// `tickler schedules audit`: a summary and a row per occurrence; with
/// `--json`, the API's answer.
async fn cli_prints_the_audit(env: &TestEnv, id: u64, audit: &Value) {
    let from = audit["from"].as_str().unwrap();
    let to = audit["to"].as_str().unwrap();
    let run = |json: bool| {
        let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
        command.args([
            "schedules",
            "audit",
            &id.to_string(),
            "--from",
            from,
            "--to",
            to,
        ]);
        if json {
            command.arg("--json");
        }
        output(command)
    };
    let table = run(false).await;
    assert!(table.status.success(), "{table:?}");
    let text = String::from_utf8_lossy(&table.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("9 expected, 3 fired, 0 missing")
            && lines[0].contains("2 paused, 2 skipped"),
        "{text}"
    );
    let rows: Vec<&str> = lines[2..]
        .iter()
        .map(|line| line.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(
        rows,
        [
            "produced", "produced", "paused", "paused", "expired", "skipped", "skipped",
            "produced", "upcoming"
        ],
        "{text}"
    );
    let json = run(true).await;
    assert!(json.status.success(), "{json:?}");
    let answer: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(answer["occurrences"], audit["occurrences"]);
}

/// Times that are not times, out of order, or an interval of more than
/// 10,000 occurrences: 400 `invalid_interval`; an unknown parameter 400
/// `invalid_request`; an unknown schedule 404. Nothing is written.
async fn bad_intervals_are_refused_and_write_nothing(env: &TestEnv, id: u64) {
    let before = written(env, id).await;
    let now = env.store.db_now().await.unwrap();
    let week = chrono::Duration::days(8);
    for (query, code) in [
        ("from=yesterday".to_owned(), "invalid_interval"),
        ("to=".to_owned(), "invalid_interval"),
        (
            format!("from={}&to={}", time_format(now), time_format(now - week)),
            "invalid_interval",
        ),
        (
            format!("from={}&to={}", time_format(now), time_format(now + week)),
            "invalid_interval",
        ),
        ("since=2027-01-01T00:00:00Z".to_owned(), "invalid_request"),
    ] {
        let (status, answer) = env.get(&format!("/v1/schedules/{id}/audit?{query}")).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some(code)),
            "{query}: {answer}"
        );
    }
    let (status, answer) = env.get("/v1/schedules/987654/audit").await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    assert_eq!(written(env, id).await, before, "an audit writes nothing");
}
