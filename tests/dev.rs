//! `tickler dev` (#47): a virtual clock that a service's own tests move, so
//! that a job 30 days out is produced at once, a daily schedule's
//! occurrences fall due and an ack deadline passes; and `tickler serve`
//! never has it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tickler::app;
use tickler_testkit::{records_read, records_read_keys, TestEnv};
use tokio_util::sync::CancellationToken;

const DAY_MS: i64 = 86_400_000;

fn id_of(job: &Value) -> u64 {
    job["id"]
        .as_u64()
        .or_else(|| job["id"].as_str()?.parse().ok())
        .expect("a job id")
}

async fn advance(env: &TestEnv, ms: i64) -> Value {
    let (status, clock) = env.post("/v1/dev/clock", json!({"advance_ms": ms})).await;
    assert_eq!(status, 200, "{clock}");
    clock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_thirty_days_out_is_produced_once_the_clock_moves() {
    let env = TestEnv::start_dev_with(|c| {
        c.reconciler.interval_ms = 200;
    })
    .await;
    let consumer = env.consumer();
    let (status, clock) = env.get("/v1/dev/clock").await;
    assert_eq!((status, &clock["offset_ms"]), (200, &json!(0)), "{clock}");

    let reminder = env
        .job_create(
            json!({"key": "reminder-1", "payload": {"remind": "renewal"}, "delay_ms": 30 * DAY_MS}),
        )
        .await;
    let id = id_of(&reminder);
    // A result is expected within an hour of dispatch.
    let awaited = env
        .job_create(
            json!({"key": "awaited", "payload": 2, "delay_ms": 2 * DAY_MS,
            "expects_result": true, "ack_timeout_ms": 3_600_000, "max_attempts": 2,
            "backoff_base_ms": 1_000, "backoff_cap_ms": 1_000}),
        )
        .await;
    let awaited_id = id_of(&awaited);
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "daily-digest", "payload": "digest",
                "every_ms": DAY_MS, "misfire": "fire_all"}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    assert!(
        records_read(&consumer, 1, Duration::from_secs(2))
            .await
            .is_empty(),
        "nothing is due before the clock moves"
    );

    // Three days: the awaited job is sent, and the schedule's first
    // occurrences fall due.
    let moved = advance(&env, 3 * DAY_MS).await;
    assert_eq!(moved["offset_ms"], json!(3 * DAY_MS), "{moved}");
    let started = Instant::now();
    env.status_await(awaited_id, "dispatched", Duration::from_secs(15))
        .await;
    let took = started.elapsed();
    let first = env.get(&format!("/v1/jobs/{awaited_id}")).await.1;
    assert_eq!(first["attempt"], json!(1), "{first}");
    // An hour and a bit later, with no result: its ack deadline passes, and
    // the retry goes after its backoff.
    advance(&env, 3_600_000 + 60_000).await;
    let retried = tickler_testkit::eventually(Duration::from_secs(15), || async {
        let job = env.get(&format!("/v1/jobs/{awaited_id}")).await.1;
        (job["attempt"] == json!(2)).then_some(job)
    })
    .await
    .expect("the ack deadline passed by the moved clock: a second attempt");
    assert!(
        retried["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("ack timeout")),
        "{retried}"
    );

    // A job due in 5 days that must not go out more than a minute late:
    // the jump passes its expiry too, and it expires unsent.
    let (_, clock) = env.get("/v1/dev/clock").await;
    let now: chrono::DateTime<chrono::Utc> = clock["now"].as_str().unwrap().parse().unwrap();
    let expires_at = now + chrono::TimeDelta::milliseconds(5 * DAY_MS + 60_000);
    let expiring = env
        .job_create(
            json!({"key": "expiring", "payload": 3, "delay_ms": 5 * DAY_MS,
            "expires_at": expires_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)}),
        )
        .await;

    // The rest of the thirty days: the reminder is produced at once.
    advance(&env, 27 * DAY_MS).await;
    env.status_await(id_of(&expiring), "expired", Duration::from_secs(15))
        .await;
    env.status_await(id, "dispatched", Duration::from_secs(15))
        .await;
    let records = records_read_keys(&consumer, 1_000, Duration::from_secs(8)).await;
    let keys: Vec<&str> = records.iter().filter_map(|r| r.key.as_deref()).collect();
    assert!(
        keys.contains(&"reminder-1") && keys.contains(&"awaited") && !keys.contains(&"expiring"),
        "on the topic: {keys:?}"
    );
    let job = env.get(&format!("/v1/jobs/{id}")).await.1;
    let (_, clock) = env.get("/v1/dev/clock").await;
    assert!(
        job["dispatched_at"].as_str().unwrap() >= job["run_at"].as_str().unwrap(),
        "never early by the moved clock: {job}"
    );
    assert!(clock["now"].as_str().unwrap() >= job["run_at"].as_str().unwrap());

    // Thirty days of a daily schedule: thirty occurrences at most (one a
    // day from its creation), at least the 29 whole days passed.
    let occurrences = tickler_testkit::eventually(Duration::from_secs(20), || async {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE job_key LIKE 'daily-digest@%'")
                .fetch_one(&env.sql)
                .await
                .unwrap();
        (n >= 29).then_some(n)
    })
    .await
    .expect("the daily schedule's occurrences fell due");
    assert!(occurrences <= 31, "{occurrences}");
    println!(
        "dispatched {:?} after a 3-day advance; {occurrences} daily occurrences after 30 days",
        took
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clock_refuses_bad_moves_and_is_not_served_by_serve() {
    let env = TestEnv::start_dev_with(|_| {}).await;
    for bad in [
        json!({"advance_ms": 0}),
        json!({"advance_ms": -5}),
        json!({"by": 1}),
    ] {
        let (status, body) = env.post("/v1/dev/clock", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let reader =
        tickler_testkit::token_create(&env.config.mysql.url, "reader", &["*"], &["read"]).await;
    let http = tickler_testkit::http_with_token(&reader);
    let (status, body) = env
        .request_with(
            &http,
            "POST",
            "/v1/dev/clock",
            Some(r#"{"advance_ms":1000}"#.to_owned()),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (403, &json!("forbidden_scope"))
    );
    let (_, clock) = env.get("/v1/dev/clock").await;
    assert_eq!(clock["offset_ms"], json!(0), "nothing moved: {clock}");

    // `tickler serve` on the same database refuses to start beside dev.
    let refused = app::start(env.config.clone(), CancellationToken::new()).await;
    let err = refused
        .err()
        .expect("serve beside dev is refused")
        .to_string();
    assert!(
        err.contains("tickler dev") && err.contains("database of its own"),
        "{err}"
    );

    // `tickler serve` has no clock: the route does not exist.
    let serve = TestEnv::start().await;
    let (status, body) = serve
        .post("/v1/dev/clock", json!({"advance_ms": 1000}))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("no_route")),
        "{body}"
    );
    // …and dev refuses to start beside it.
    let refused = app::start_dev(serve.config.clone(), CancellationToken::new()).await;
    let err = refused
        .err()
        .expect("dev beside serve is refused")
        .to_string();
    assert!(err.contains("tickler serve"), "{err}");
    serve.finish().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dev_that_finds_a_serve_beside_it_moves_no_clock_and_stops() {
    let env = TestEnv::start_dev_with(|_| {}).await;
    let (status, _) = env.post("/v1/dev/clock", json!({"advance_ms": 1000})).await;
    assert_eq!(status, 200);
    // A `tickler serve` that started while the database did not answer
    // (so it checked nothing): its row, alive.
    sqlx::query(
        "INSERT INTO instances (host, pid, version, roles, ttl_ms, started_at, heartbeat_at) \
         VALUES ('prod-1', 1, '0.0.0+schema.1', 'api,dispatcher', 120000, \
         UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))",
    )
    .execute(&env.sql)
    .await
    .unwrap();
    let (status, body) = env.post("/v1/dev/clock", json!({"advance_ms": 1000})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("clock_neighbour")),
        "{body}"
    );
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("prod-1"));
    // Within the guard's period (and its shutdown), dev is gone.
    let began = Instant::now();
    let mut stopped = false;
    while began.elapsed() < Duration::from_secs(30) {
        let answer = reqwest::Client::new()
            .get(format!("{}/healthz", env.base_url))
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if answer.is_err() {
            stopped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(stopped, "tickler dev stops beside a serve");
    env.finish().await;
}
