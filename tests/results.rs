//! Results, retries and dead jobs: each outcome through both
//! channels (the results topic and `POST /v1/jobs/{id}/result`), backoff
//! bounds, ack timeouts, exhausted attempts, stale / repeated / malformed
//! reports, dead letters, redrive, and a restart of tickler while results
//! are in flight.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{json, Value};
use tickler::config::Role;
use tickler::kafka;
use tickler::roles::service::Service;
use tickler::store::Dispatched;
use tickler_testkit::chronos::{Services, World};
use tickler_testkit::procs::PrivateMariadb;
use tickler_testkit::{consumer_from_beginning, eventually, records_read, unique, Record, TestEnv};

/// A producer for reports. Each send is awaited before the next, so every
/// report is its own batch on the broker (tansu cannot resume a consumer
/// group inside a multi-record batch).
fn report_producer(brokers: &str) -> FutureProducer {
    tickler_testkit::producer(brokers, &BTreeMap::new(), 0, 5_000).expect("kafka producer")
}

async fn report_send(producer: &FutureProducer, topic: &str, key: &str, body: &[u8]) {
    producer
        .send(
            FutureRecord::<str, [u8]>::to(topic).key(key).payload(body),
            Duration::from_secs(5),
        )
        .await
        .expect("report produced");
}

/// Sends a report keyed by its job id, as docs/results.md advises: the
/// reports of one job then share a partition and keep their order.
async fn report_topic(env: &TestEnv, producer: &FutureProducer, report: Value) {
    report_send(
        producer,
        &env.config.results.topic,
        &report["job_id"].to_string(),
        report.to_string().as_bytes(),
    )
    .await;
}

async fn report_http(env: &TestEnv, id: u64, report: Value) -> (u16, Value) {
    env.post(&format!("/v1/jobs/{id}/result"), report).await
}

/// A tickler with short reconcile passes and a dead-letter topic.
async fn env_start() -> TestEnv {
    let dead = unique("tickler-dead-");
    TestEnv::start_with(move |c| {
        c.reconciler.interval_ms = 200;
        c.jobs.dead_letter_topic = Some(dead);
    })
    .await
}

struct Row {
    status: String,
    attempt: u32,
    max_attempts: u32,
    /// schedule_time - updated_at: the delay a retry was given.
    delay_ms: i64,
    last_error: Option<String>,
    version: u32,
}

async fn row(env: &TestEnv, id: u64) -> Row {
    let (status, attempt, max_attempts, delay_ms, last_error, version): (
        String,
        u32,
        u32,
        i64,
        Option<String>,
        u32,
    ) = sqlx::query_as(
        "SELECT CAST(status AS CHAR), attempt, max_attempts, \
         TIMESTAMPDIFF(MICROSECOND, updated_at, schedule_time) DIV 1000, \
         CAST(last_error AS CHAR), version FROM jobs WHERE id = ?",
    )
    .bind(id)
    .fetch_one(&env.sql)
    .await
    .unwrap();
    Row {
        status,
        attempt,
        max_attempts,
        delay_ms,
        last_error,
        version,
    }
}

fn id_of(job: &Value) -> u64 {
    job["id"].as_u64().unwrap()
}

/// Reads records until one of job `id` at `attempt` arrives.
async fn record_await(
    consumer: &rdkafka::consumer::StreamConsumer,
    id: u64,
    attempt: u32,
) -> Record {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let records = records_read(consumer, 1, left).await;
        let Some(record) = records.into_iter().next() else {
            panic!("no record of job {id} attempt {attempt}");
        };
        let this_id = record
            .header("tickler-job-id")
            .map(|v| v.parse::<u64>().unwrap());
        let this_attempt = record
            .header("tickler-attempt")
            .map(|v| v.parse::<u32>().unwrap());
        if this_id == Some(id) && this_attempt == Some(attempt) {
            return record;
        }
    }
}

fn header_ms(record: &Record, name: &str) -> i64 {
    record.header(name).unwrap().parse().unwrap()
}

async fn events_count(env: &TestEnv, id: u64) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM job_events WHERE job_id = ?")
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_and_failed_through_both_channels_and_dead_letters() {
    let env = env_start().await;
    let consumer = env.consumer();
    let producer = report_producer(&env.config.kafka.brokers);
    let mut ids = Vec::new();
    for n in 0..4 {
        let job = env
            .job_create(
                json!({"payload": {"n": n}, "delay_ms": 0, "expects_result": true,
                "headers": {"trace": format!("t{n}")}}),
            )
            .await;
        ids.push(id_of(&job));
    }
    let records = records_read(&consumer, 4, Duration::from_secs(15)).await;
    assert_eq!(records.len(), 4);
    // Reported at once: some of these beat the dispatcher's marking.
    let (status, body) = report_http(&env, ids[0], json!({"attempt": 1, "outcome": "ok"})).await;
    assert_eq!((status, &body["applied"]), (200, &json!(true)), "{body}");
    assert_eq!(body["job"]["status"], "succeeded");
    report_topic(
        &env,
        &producer,
        json!({"job_id": ids[1], "attempt": 1, "outcome": "ok"}),
    )
    .await;
    let (status, body) = report_http(
        &env,
        ids[2],
        json!({"attempt": 1, "outcome": "failed", "error": "card declined"}),
    )
    .await;
    assert_eq!(
        (status, &body["job"]["status"]),
        (200, &json!("dead")),
        "{body}"
    );
    report_topic(
        &env,
        &producer,
        json!({"job_id": ids[3], "attempt": 1, "outcome": "failed", "error": "no such user"}),
    )
    .await;

    env.status_await(ids[1], "succeeded", Duration::from_secs(10))
        .await;
    env.status_await(ids[3], "dead", Duration::from_secs(10))
        .await;
    assert_eq!(
        row(&env, ids[2]).await.last_error.as_deref(),
        Some("card declined")
    );
    assert_eq!(
        row(&env, ids[3]).await.last_error.as_deref(),
        Some("no such user")
    );
    // Where each record landed is kept, even when the report came first.
    let positions = eventually(Duration::from_secs(10), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE kafka_offset IS NOT NULL AND claim_token IS NULL",
        )
        .fetch_one(&env.sql)
        .await
        .unwrap();
        (n == 4).then_some(())
    })
    .await;
    assert!(positions.is_some(), "every job records its kafka position");
    let (_, history) = env.get(&format!("/v1/jobs/{}/history", ids[1])).await;
    let last = history["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["status"].as_str(), last["actor"].as_str()),
        (Some("succeeded"), Some("results"))
    );

    // The dead-letter topic gets both dead jobs, with their last error.
    let dead_topic = env.config.jobs.dead_letter_topic.clone().unwrap();
    let dead = consumer_from_beginning(&env.config.kafka.brokers, &dead_topic);
    let letters = records_read(&dead, 2, Duration::from_secs(15)).await;
    assert_eq!(letters.len(), 2, "two dead letters");
    let by_id: HashMap<u64, &Record> = letters
        .iter()
        .map(|r| (r.header("tickler-job-id").unwrap().parse().unwrap(), r))
        .collect();
    let letter = by_id[&ids[2]];
    assert_eq!(letter.header("tickler-error"), Some("card declined"));
    assert_eq!(letter.header("tickler-topic"), Some(env.topic.as_str()));
    assert_eq!(letter.header("tickler-attempt"), Some("1"));
    assert_eq!(letter.header("trace"), Some("t2"));
    assert_eq!(letter.payload, br#"{"n":2}"#);
    assert!(by_id.contains_key(&ids[3]));
    let owed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM dead_letters")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(owed, 0, "the outbox is emptied once produced");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_within_bounds_until_attempts_run_out() {
    let env = env_start().await;
    let consumer = env.consumer();
    let producer = report_producer(&env.config.kafka.brokers);
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 0, "expects_result": true,
            "max_attempts": 4, "backoff_base_ms": 1000, "backoff_cap_ms": 1500}))
        .await;
    let id = id_of(&job);

    // Attempt 1 fails over HTTP: delay in [500, 1000] (base).
    let first = record_await(&consumer, id, 1).await;
    let (_, body) = report_http(
        &env,
        id,
        json!({"attempt": 1, "outcome": "retry", "error": "busy"}),
    )
    .await;
    assert_eq!(body["applied"], true, "{body}");
    let r = row(&env, id).await;
    assert_eq!((r.status.as_str(), r.attempt), ("pending", 2));
    assert!((500..=1000).contains(&r.delay_ms), "delay {}", r.delay_ms);
    assert_eq!(r.last_error.as_deref(), Some("busy"));
    let retry_delay_1 = r.delay_ms;

    // Attempt 2 fails over the topic: delay in [750, 1500] (2 x base, capped).
    let second = record_await(&consumer, id, 2).await;
    assert!(
        header_ms(&second, "tickler-dispatched-at") - header_ms(&first, "tickler-dispatched-at")
            >= retry_delay_1,
        "attempt 2 is not produced before its backoff"
    );
    report_topic(
        &env,
        &producer,
        json!({"job_id": id, "attempt": 2, "outcome": "retry"}),
    )
    .await;
    let r = eventually(Duration::from_secs(10), || async {
        let r = row(&env, id).await;
        (r.attempt == 3).then_some(r)
    })
    .await
    .expect("the topic's retry applied");
    assert!((750..=1500).contains(&r.delay_ms), "delay {}", r.delay_ms);

    // Attempt 3 asks for its own delay.
    record_await(&consumer, id, 3).await;
    let (_, body) = report_http(
        &env,
        id,
        json!({"attempt": 3, "outcome": "retry", "retry_after_ms": 300}),
    )
    .await;
    assert_eq!(body["job"]["attempt"], 4, "{body}");
    assert_eq!(row(&env, id).await.delay_ms, 300);

    // Attempt 4 is the last: a retry makes it dead.
    record_await(&consumer, id, 4).await;
    report_topic(
        &env,
        &producer,
        json!({"job_id": id, "attempt": 4, "outcome": "retry", "error": "still busy"}),
    )
    .await;
    env.status_await(id, "dead", Duration::from_secs(10)).await;
    let r = row(&env, id).await;
    assert_eq!(r.attempt, 4);
    assert_eq!(
        r.last_error.as_deref(),
        Some("attempts exhausted (4 of 4): still busy")
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_months_away_costs_nothing_in_redis() {
    let env = env_start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 0, "expects_result": true}))
        .await;
    let id = id_of(&job);
    record_await(&consumer, id, 1).await;
    let month_ms = 30 * 86_400_000u64;
    let (_, body) = report_http(
        &env,
        id,
        json!({"attempt": 1, "outcome": "retry", "retry_after_ms": month_ms}),
    )
    .await;
    assert_eq!(body["job"]["status"], "pending", "{body}");
    assert_eq!(row(&env, id).await.delay_ms, month_ms as i64);
    // A loader pass from scratch (no high-water mark: the whole window, and every
    // edited row) leaves it out of Redis.
    let now = env.store.db_now().await.unwrap();
    env.loader().run_once(now).await.unwrap();
    assert!(!env.redis_holds(id).await, "a far retry is in MySQL only");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_past_the_ack_timeout_retries_then_buries() {
    let topic_policy = unique("tickler-test-");
    kafka::topic_ensure(&tickler_testkit::kafka_brokers(), &topic_policy, 1)
        .await
        .unwrap();
    let configured = topic_policy.clone();
    let env = TestEnv::start_with(move |c| {
        c.reconciler.interval_ms = 200;
        // Per-topic configuration: a result is expected, quickly.
        c.topics.insert(
            configured,
            tickler::config::TopicConfig {
                expects_result: Some(true),
                ack_timeout_ms: Some(1_000),
                max_attempts: Some(2),
                backoff_base_ms: Some(100),
                backoff_cap_ms: Some(100),
                ..Default::default()
            },
        );
    })
    .await;
    let consumer = consumer_from_beginning(&env.config.kafka.brokers, &topic_policy);
    let quiet = env
        .job_create(json!({"topic": topic_policy, "payload": 1, "delay_ms": 0}))
        .await;
    let id = id_of(&quiet);
    assert_eq!(quiet["expects_result"], true, "from the topic: {quiet}");
    let no_result = env.job_create(json!({"payload": 2, "delay_ms": 0})).await;

    let first = record_await(&consumer, id, 1).await;
    let second = record_await(&consumer, id, 2).await;
    let gap =
        header_ms(&second, "tickler-dispatched-at") - header_ms(&first, "tickler-dispatched-at");
    assert!(
        gap >= 1_000 + 50,
        "retried only after the ack timeout and backoff: {gap} ms"
    );
    env.status_await(id, "dead", Duration::from_secs(10)).await;
    let r = row(&env, id).await;
    assert_eq!(r.attempt, 2);
    let error = r.last_error.unwrap();
    assert!(
        error.contains("no result within the ack timeout of 1000 ms"),
        "{error}"
    );

    // A job that expects no result is finished once dispatched.
    let other = id_of(&no_result);
    env.status_await(other, "dispatched", Duration::from_secs(10))
        .await;
    let (_, job) = env.get(&format!("/v1/jobs/{other}")).await;
    assert_eq!(job["ack_deadline"], Value::Null);
    let (status, body) = report_http(&env, other, json!({"attempt": 1, "outcome": "retry"})).await;
    assert_eq!(
        (status, &body["ignored"]),
        (200, &json!("not_expected")),
        "{body}"
    );
    assert_eq!(env.job_status(other).await, "dispatched");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_repeated_unknown_and_malformed_reports_change_nothing() {
    let env = env_start().await;
    let consumer = env.consumer();
    let producer = report_producer(&env.config.kafka.brokers);
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 0, "expects_result": true}))
        .await;
    let id = id_of(&job);
    record_await(&consumer, id, 1).await;
    env.status_await(id, "dispatched", Duration::from_secs(5))
        .await;
    let before = (row(&env, id).await.version, events_count(&env, id).await);

    // HTTP: another attempt, no such job, malformed bodies.
    let (status, body) = report_http(&env, id, json!({"attempt": 2, "outcome": "ok"})).await;
    assert_eq!(
        (status, &body["applied"], &body["ignored"]),
        (200, &json!(false), &json!("stale_attempt")),
        "{body}"
    );
    let (status, body) =
        report_http(&env, 999_999_999, json!({"attempt": 1, "outcome": "ok"})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("not_found")),
        "{body}"
    );
    let (status, body) = report_http(&env, id, json!({"outcome": "ok"})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_report")),
        "{body}"
    );
    let (status, body) = report_http(&env, id, json!({"attempt": 1, "outcome": "maybe"})).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = report_http(
        &env,
        id,
        json!({"attempt": 1, "outcome": "ok", "retry_after_ms": 5}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_report")),
        "{body}"
    );
    assert_eq!(
        (row(&env, id).await.version, events_count(&env, id).await),
        before,
        "nothing written"
    );

    // Topic: garbage, a wrong outcome, a stale attempt, an unknown job...
    let topic = env.config.results.topic.clone();
    report_send(&producer, &topic, "x", b"\xff not json").await;
    report_send(
        &producer,
        &topic,
        "1",
        br#"{"job_id": 1, "attempt": 1, "outcome": "maybe"}"#,
    )
    .await;
    report_topic(
        &env,
        &producer,
        json!({"job_id": id, "attempt": 7, "outcome": "failed"}),
    )
    .await;
    report_topic(
        &env,
        &producer,
        json!({"job_id": 999_999_999, "attempt": 1, "outcome": "ok"}),
    )
    .await;
    // ...do not block the report behind them.
    report_topic(
        &env,
        &producer,
        json!({"job_id": id, "attempt": 1, "outcome": "ok"}),
    )
    .await;
    env.status_await(id, "succeeded", Duration::from_secs(10))
        .await;
    let done = (row(&env, id).await.version, events_count(&env, id).await);

    // Repeats, on both channels, change nothing.
    report_topic(
        &env,
        &producer,
        json!({"job_id": id, "attempt": 1, "outcome": "failed"}),
    )
    .await;
    let (status, body) = report_http(&env, id, json!({"attempt": 1, "outcome": "ok"})).await;
    assert_eq!(
        (status, &body["ignored"]),
        (200, &json!("finished")),
        "{body}"
    );
    let expected = [
        "channel=\"topic\",reason=\"stale_attempt\"",
        "channel=\"topic\",reason=\"unknown_job\"",
        "channel=\"topic\",reason=\"finished\"",
        "channel=\"http\",reason=\"stale_attempt\"",
        "channel=\"http\",reason=\"finished\"",
    ];
    let counted = eventually(Duration::from_secs(10), || async {
        let (_, text) = env.metrics_text().await;
        let all = metric(&text, "tickler_results_malformed_total") >= 2.0
            && expected.iter().all(|label| {
                metric(&text, &format!("tickler_results_ignored_total{{{label}}}")) >= 1.0
            });
        all.then_some(())
    })
    .await;
    let (_, text) = env.metrics_text().await;
    assert!(
        counted.is_some(),
        "every ignored report is counted:\n{text}"
    );
    assert_eq!(
        (row(&env, id).await.version, events_count(&env, id).await),
        done,
        "nothing written by repeats"
    );
    assert_eq!(env.job_status(id).await, "succeeded");
    env.finish().await;
}

/// The value of a metric line `name value` (0 when absent).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_job_is_redriven_with_a_fresh_budget() {
    let env = env_start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 0, "expects_result": true, "max_attempts": 1}))
        .await;
    let id = id_of(&job);
    record_await(&consumer, id, 1).await;
    let (status, body) = env.post(&format!("/v1/jobs/{id}/redrive"), json!({})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("not_dead")),
        "{body}"
    );
    report_http(
        &env,
        id,
        json!({"attempt": 1, "outcome": "retry", "error": "down"}),
    )
    .await;
    assert_eq!(env.job_status(id).await, "dead", "one attempt only");

    let (status, body) = env
        .post(
            &format!("/v1/jobs/{id}/redrive"),
            json!({"max_attempts": 2}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["status"].as_str(), body["attempt"].as_u64()),
        (Some("pending"), Some(2))
    );
    assert_eq!(body["max_attempts"], 3, "attempts 2 and 3 to go");
    assert_eq!(row(&env, id).await.max_attempts, 3);
    // The next attempt number: consumers that deduplicate see a new one.
    record_await(&consumer, id, 2).await;
    report_http(&env, id, json!({"attempt": 2, "outcome": "retry"})).await;
    record_await(&consumer, id, 3).await;
    let (_, body) = report_http(&env, id, json!({"attempt": 3, "outcome": "ok"})).await;
    assert_eq!(body["job"]["status"], "succeeded", "{body}");

    let (status, body) = env.post("/v1/jobs/999999999/redrive", json!({})).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = env
        .post(
            &format!("/v1/jobs/{id}/redrive"),
            json!({"max_attempts": 0}),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("invalid_policy")),
        "{body}"
    );
    env.finish().await;
}

/// tickler is killed (-9) and restarted while consumers keep reporting: every
/// report is applied exactly once in effect — all jobs end succeeded at
/// attempt 1, none retried for want of its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_results_are_in_flight_loses_none() {
    let mut world = World::start(Services::shared(), &[]).await;
    let n = 120;
    let start = chrono::Utc::now() + chrono::Duration::milliseconds(500);
    let mut ids = HashSet::new();
    for i in 0..n {
        let due = start + chrono::Duration::milliseconds(25 * i);
        let (status, job) = world
            .post_job(
                &json!({"topic": world.topic, "payload": i, "run_at": due.to_rfc3339(),
                "expects_result": true, "ack_timeout_ms": 120_000}),
            )
            .await;
        assert_eq!(status, 201, "{job}");
        ids.insert(job["id"].as_u64().unwrap());
    }
    // The consumer: every record read is reported ok on the results topic.
    let brokers = world.services.brokers.clone();
    let business = consumer_from_beginning(&brokers, &world.topic);
    let results_topic = world.results_topic.clone();
    // How many reports the consumer sent, for the failure message: a stall
    // on the consumer's side reads differently from one on tickler's.
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sent_by_reporter = sent.clone();
    let reporter = tokio::spawn(async move {
        let producer = report_producer(&brokers);
        loop {
            let records = records_read(&business, 1, Duration::from_secs(30)).await;
            // Quiet for a while (a slow restart): keep reading; the test
            // aborts this task when it is done.
            let Some(record) = records.first() else {
                continue;
            };
            let report = json!({
                "job_id": record.header("tickler-job-id").unwrap().parse::<u64>().unwrap(),
                "attempt": record.header("tickler-attempt").unwrap().parse::<u32>().unwrap(),
                "outcome": "ok",
            });
            let key = report["job_id"].to_string();
            report_send(
                &producer,
                &results_topic,
                &key,
                report.to_string().as_bytes(),
            )
            .await;
            sent_by_reporter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });

    // Kill tickler while reports stream in, and bring it back.
    let half = eventually(Duration::from_secs(30), || async {
        let done: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")
            .fetch_one(&world.sql)
            .await
            .unwrap();
        (done >= n / 3).then_some(())
    })
    .await;
    assert!(half.is_some(), "results are applied before the kill");
    world.tickler.kill9();
    // Restart after the group's session timeout (6 s): tansu expires a
    // silent member only when another group request arrives, and a new
    // member that joins while the dead leader is still there can race into
    // a group formed with no assignment, and stay idle for good (read in
    // tansu 0.6.0's coordinator/group/administrator.rs). Joining after the
    // timeout expires the dead member at once. Kafka expires members on a
    // timer and has no such race: a test-side adaptation to the broker.
    tokio::time::sleep(Duration::from_millis(
        u64::from(tickler::roles::results::RESULTS_SESSION_TIMEOUT_MS) + 2_000,
    ))
    .await;
    world.restart_tickler().await;

    let all = eventually(Duration::from_secs(120), || async {
        let done: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")
            .fetch_one(&world.sql)
            .await
            .unwrap();
        (done == n).then_some(())
    })
    .await;
    let states: Vec<(u64, String, u32)> =
        sqlx::query_as("SELECT id, CAST(status AS CHAR), attempt FROM jobs ORDER BY id")
            .fetch_all(&world.sql)
            .await
            .unwrap();
    let unfinished: Vec<_> = states.iter().filter(|(_, s, _)| s != "succeeded").collect();
    assert!(
        all.is_some(),
        "every job succeeded; unfinished: {unfinished:?}; reports sent {} (reporter done: {})\n{}",
        sent.load(std::sync::atomic::Ordering::Relaxed),
        reporter.is_finished(),
        world.tickler.log_tail()
    );
    assert!(
        states.iter().all(|(_, _, attempt)| *attempt == 1),
        "no job was retried: every report arrived"
    );
    reporter.abort();
    world.finish().await;
}

/// The deterministic form of the restart above: reports are read while
/// MySQL is down (so the consumer holds them, unapplied), then tickler is
/// killed with -9. Had it committed their offsets on reading, they would be
/// lost; every job must still end `succeeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_read_while_mysql_is_down_survive_a_kill() {
    let mut mariadb = PrivateMariadb::start().await;
    let services = Services {
        mysql_server_url: mariadb.server_url(),
        ..Services::shared()
    };
    let mut world = World::start(services, &[]).await;
    let n = 20;
    let mut ids = Vec::new();
    for i in 0..n {
        let (status, job) = world
            .post_job(&json!({"topic": world.topic, "payload": i, "delay_ms": 0,
                "expects_result": true, "ack_timeout_ms": 120_000}))
            .await;
        assert_eq!(status, 201, "{job}");
        ids.push(job["id"].as_u64().unwrap());
    }
    let dispatched = eventually(Duration::from_secs(20), || async {
        let done: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'dispatched'")
            .fetch_one(&world.sql)
            .await
            .unwrap();
        (done == n).then_some(())
    })
    .await;
    assert!(dispatched.is_some(), "all dispatched");

    mariadb.proc.kill9();
    let producer = report_producer(&world.services.brokers);
    for id in &ids {
        let report = json!({"job_id": id, "attempt": 1, "outcome": "ok"});
        report_send(
            &producer,
            &world.results_topic,
            &id.to_string(),
            report.to_string().as_bytes(),
        )
        .await;
    }
    // The consumer has read them and cannot apply them.
    let holding = eventually(Duration::from_secs(20), || async {
        world
            .tickler
            .log_tail()
            .contains("cannot apply results")
            .then_some(())
    })
    .await;
    assert!(
        holding.is_some(),
        "reports read while MySQL is down:\n{}",
        world.tickler.log_tail()
    );
    world.tickler.kill9();
    mariadb.restart().await;
    world.restart_tickler().await;

    // Up to two minutes: the restarted consumer rejoins its group only once
    // tansu has dropped the dead member, which a loaded machine delays (seen
    // to exceed a minute in about one full-suite run in ten).
    let all = eventually(Duration::from_secs(120), || async {
        let done: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'")
            .fetch_one(&world.sql)
            .await
            .ok()?;
        (done == n).then_some(())
    })
    .await;
    assert!(
        all.is_some(),
        "every report applied after the restart:\n{}",
        world.tickler.log_tail()
    );
    world.finish().await;
}

/// The race of a fast consumer, made deterministic: a report retries the job
/// while the dispatcher that produced it has not marked it yet. The mark then
/// records where the record landed, says the job was retried early (so the
/// dispatcher leaves its Redis entry, at the retry time, alone), and does not
/// turn it back into `dispatched`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_that_beats_the_mark_wins_and_the_mark_records_the_position() {
    let env = TestEnv::start_with(|c| c.roles = vec![Role::Api]).await;
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 0, "expects_result": true}))
        .await;
    let id = id_of(&job);
    // A dispatcher's claim, by hand: dispatching under token 77.
    sqlx::query(
        "UPDATE jobs SET status = 'dispatching', claim_token = 77, \
         claim_expires_at = UTC_TIMESTAMP(3) + INTERVAL 1 MINUTE WHERE id = ?",
    )
    .bind(id)
    .execute(&env.sql)
    .await
    .unwrap();
    let (_, body) = report_http(
        &env,
        id,
        json!({"attempt": 1, "outcome": "retry", "retry_after_ms": 60000}),
    )
    .await;
    assert_eq!(body["applied"], true, "{body}");
    assert!(env.redis_holds(id).await, "indexed at its retry time");

    let marked = env
        .store
        .job_mark_dispatched_many(&[Dispatched {
            id,
            token: 77,
            partition: 1,
            offset: 42,
            dispatched_at: chrono::Utc::now(),
            schedule_time: chrono::Utc::now(),
            attempt: 1,
        }])
        .await
        .unwrap();
    assert_eq!(marked.marked, 1);
    assert_eq!(marked.retried_early, vec![id]);
    let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["status"], "pending", "{job}");
    assert_eq!(job["attempt"], 2);
    assert_eq!(job["kafka"], json!({"partition": 1, "offset": 42}));
    assert_eq!(job["ack_deadline"], Value::Null);
    let token: Option<u64> = sqlx::query_scalar("SELECT claim_token FROM jobs WHERE id = ?")
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(token, None, "the claim is over");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_retry_reported_before_the_mark_leaves_no_claim_in_redis() {
    // No dispatcher: the test plays it, up to the claim, and stops there —
    // as when a consumer's report beats the dispatcher's mark.
    let env = TestEnv::start_with(|c| {
        c.roles = vec![Role::Api, Role::Loader, Role::Reconciler, Role::Results]
    })
    .await;
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 0, "expects_result": true}))
        .await;
    let id = id_of(&job);
    let shard = env.index.shard_of(id);
    let claim = eventually(Duration::from_secs(10), || async {
        let claim = env
            .index
            .job_claim(shard, 10, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        claim.ids.contains(&id).then_some(claim)
    })
    .await
    .expect("the loader indexes the job and the claim takes it");
    assert!(claim.ids.contains(&id));
    sqlx::query("UPDATE jobs SET status = 'dispatching', claim_token = 99 WHERE id = ?")
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    assert!(env.redis_holds(id).await, "in flight");
    let (status, body) = report_http(
        &env,
        id,
        json!({"attempt": 1, "outcome": "retry", "retry_after_ms": 30 * 86_400_000u64}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["job"]["status"], "pending", "{body}");
    assert!(
        !env.redis_holds(id).await,
        "a retry beyond the window leaves Redis at once, in-flight entry included"
    );
    env.finish().await;
}

/// The dead-letter producer, pass by pass: an owed record is produced once
/// and forgotten; one whose topic no longer has dead letters is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_producer_produces_each_owed_record_once() {
    use std::sync::Arc;
    use tickler::roles::results::{DeadLetterConfig, DeadLetterProducer, DeadLettersReport};
    let dead = unique("tickler-dead-");
    // The API only: no other producer empties the outbox.
    let env = TestEnv::start_with(|c| {
        c.roles = vec![Role::Api];
        c.jobs.dead_letter_topic = Some(dead.clone());
    })
    .await;
    kafka::topic_ensure_with(
        &env.config.kafka.brokers,
        &env.config.kafka.options,
        &dead,
        1,
    )
    .await
    .unwrap();
    let job = env
        .job_create(json!({"payload": {"n": 1}, "delay_ms": 60_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    // Dead by hand, with the outbox row its death writes.
    sqlx::query("UPDATE jobs SET status = 'dead', last_error = 'card declined' WHERE id = ?")
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO dead_letters (job_id, attempt, created_at, error) \
         VALUES (?, 1, UTC_TIMESTAMP(3), 'card declined')",
    )
    .bind(id)
    .execute(&env.sql)
    .await
    .unwrap();
    let producer_with = |config: &tickler::config::Config| {
        DeadLetterProducer::new(
            env.store.clone(),
            DeadLetterConfig::from_config(&config),
            Arc::new(tokio::sync::Notify::new()),
        )
    };
    let mut producer = producer_with(&env.config);
    let first = producer.run_once(chrono::Utc::now()).await.unwrap();
    assert_eq!(
        first,
        DeadLettersReport {
            produced: 1,
            ..DeadLettersReport::default()
        }
    );
    assert_eq!(
        producer.run_once(chrono::Utc::now()).await.unwrap(),
        DeadLettersReport::default()
    );
    let consumer = consumer_from_beginning(&env.config.kafka.brokers, &dead);
    let letters = records_read(&consumer, 1, Duration::from_secs(15)).await;
    assert_eq!(letters.len(), 1);
    assert_eq!(
        letters[0].header("tickler-job-id"),
        Some(id.to_string().as_str())
    );
    assert_eq!(letters[0].header("tickler-error"), Some("card declined"));

    // Dead letters turned off since the job died: the row is dropped.
    sqlx::query(
        "INSERT INTO dead_letters (job_id, attempt, created_at, error) \
         VALUES (?, 2, UTC_TIMESTAMP(3), 'again')",
    )
    .bind(id)
    .execute(&env.sql)
    .await
    .unwrap();
    let mut off = env.config.clone();
    off.jobs.dead_letter_topic = None;
    assert_eq!(
        producer_with(&off)
            .run_once(chrono::Utc::now())
            .await
            .unwrap(),
        DeadLettersReport {
            dropped: 1,
            ..DeadLettersReport::default()
        }
    );
    env.finish().await;
}

/// The results consumer, batch by batch: a report is applied and its offset
/// committed; a record that is not a report is counted and skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_results_consumer_applies_a_batch_and_commits_it() {
    use std::sync::Arc;
    use tickler::roles::results::{ResultsConsumer, ResultsConsumerConfig};
    // No results role: this test's consumer is the group's only member.
    let env = TestEnv::start_with(|c| {
        c.roles = vec![Role::Api, Role::Loader, Role::Dispatcher];
    })
    .await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 0, "expects_result": true}))
        .await;
    let id = id_of(&job);
    record_await(&consumer, id, 1).await;

    let resolver = tickler::roles::resolver::Resolver::new(
        env.store.clone(),
        env.index.clone(),
        &env.config,
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let results = ResultsConsumer::new(resolver, ResultsConsumerConfig::from_config(&env.config));
    results.subscribe().await.unwrap();
    let producer = report_producer(&env.config.kafka.brokers);
    report_send(&producer, &env.config.results.topic, "x", b"not a report").await;
    report_topic(
        &env,
        &producer,
        json!({"job_id": id, "attempt": 1, "outcome": "ok"}),
    )
    .await;

    let cancel = tokio_util::sync::CancellationToken::new();
    let mut records = 0;
    let mut malformed = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while records < 2 && tokio::time::Instant::now() < deadline {
        let report = tokio::time::timeout(Duration::from_secs(30), results.run_once(&cancel))
            .await
            .expect("a batch within 30 s")
            .expect("not cancelled");
        if report.records > 0 {
            assert!(report.committed, "{report:?}");
        }
        records += report.records;
        malformed += report.malformed;
    }
    assert_eq!((records, malformed), (2, 1));
    assert_eq!(env.job_status(id).await, "succeeded");
    env.finish().await;
}
