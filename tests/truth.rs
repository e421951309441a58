//! Gauges from the truth and `/v1/stats`: counts by status and topic,
//! overdue jobs, the index's drift from MySQL and the next due job, read
//! from the stores as they are; and the trace context of a create request
//! travels with its job to the Kafka record.

use std::time::Duration;

use chrono::DurationRound;
use serde_json::{json, Value};
use tickler::config::Role;
use tickler::roles::service::Service;
use tickler_testkit::{eventually, records_read, TestEnv};

/// A tickler without a dispatcher, so due jobs stay due.
async fn start_without_dispatcher() -> TestEnv {
    TestEnv::start_with(|c| {
        c.roles = vec![Role::Api, Role::Loader, Role::Reconciler];
        c.gauges.interval_ms = 1_000;
        c.gauges.counts_interval_ms = 1_000;
    })
    .await
}

fn count_of(stats: &Value, topic: &str, status: &str) -> u64 {
    stats["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["topic"] == topic && c["status"] == status)
        .map_or(0, |c| c["count"].as_u64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_gauges_say_what_the_stores_hold() {
    let env = start_without_dispatcher().await;
    let topic = env.topic.clone();
    let mut ids = Vec::new();
    for i in 0..4 {
        let job = env
            .job_create(json!({"key": format!("s{i}"), "delay_ms": 2_000}))
            .await;
        ids.push(job["id"].as_u64().unwrap());
    }
    env.job_create(json!({"key": "later", "delay_ms": 86_400_000}))
        .await;
    // Outside the window, so never in Redis.
    let dead = env
        .job_create(json!({"key": "dead", "delay_ms": 86_400_000}))
        .await;
    sqlx::query("UPDATE jobs SET status = 'dead' WHERE id = ?")
        .bind(dead["id"].as_u64())
        .execute(&env.sql)
        .await
        .unwrap();

    // Four become due and stay so: nobody dispatches here.
    let stats = eventually(Duration::from_secs(15), || async {
        let (status, stats) = env.get("/v1/stats").await;
        assert_eq!(status, 200, "{stats}");
        (stats["overdue"]["count"] == 4 && stats["overdue"]["oldest_age_ms"].as_i64() > Some(0))
            .then_some(stats)
    })
    .await
    .expect("four overdue jobs");
    assert_eq!(count_of(&stats, &topic, "pending"), 5, "{stats}");
    assert_eq!(count_of(&stats, &topic, "dead"), 1);
    assert_eq!(
        stats["window"]["mysql"], 4,
        "the due ones; not tomorrow's: {stats}"
    );
    assert_eq!(stats["window"]["redis"], 4);
    assert_eq!(stats["window"]["drift"], 0);
    assert!(
        stats["next_due_in_ms"].as_i64().unwrap() < 0,
        "overdue: {stats}"
    );
    assert_eq!(stats["instances"]["live"], 1);
    assert_eq!(stats["instances"]["dispatchers"], 0);

    // Redis loses a job: the drift says so.
    assert_eq!(env.index.job_remove_many(&[ids[0]]).await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (_, stats) = env.get("/v1/stats").await;
    assert_eq!(stats["window"]["drift"], 1, "{stats}");

    // The reporter publishes them as gauges.
    let pending = format!("tickler_jobs{{status=\"pending\",topic=\"{topic}\"}} 5");
    let gauges = eventually(Duration::from_secs(10), || async {
        let (_, text) = env.metrics_text().await;
        text.contains(&pending).then_some(text)
    })
    .await;
    assert!(gauges.is_some(), "no {pending} in /metrics");

    // A token sees only its own topics' counts.
    let reader =
        tickler_testkit::token_create(&env.config.mysql.url, "reader", &["elsewhere.*"], &["read"])
            .await;
    let http = tickler_testkit::http_with_token(&reader);
    let (status, stats) = env.request_with(&http, "GET", "/v1/stats", None).await;
    assert_eq!(status, 200);
    assert_eq!(count_of(&stats, &topic, "pending"), 0, "{stats}");
    assert_eq!(stats["partial"], true);
    assert!(
        stats["overdue"].is_null() && stats["window"].is_null(),
        "deployment-wide figures are left out: {stats}"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_travels_with_its_job_to_the_record() {
    let env = TestEnv::start().await;
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let consumer = env.consumer();
    let send = |traceparent: &'static str, key: &'static str| {
        env.http
            .post(format!("{}/v1/jobs", env.base_url))
            .header("content-type", "application/json")
            .header("traceparent", traceparent)
            .body(json!({"topic": env.topic, "key": key, "delay_ms": 100}).to_string())
            .send()
    };
    let traced: Value = send(trace, "traced").await.unwrap().json().await.unwrap();
    assert_eq!(traced["traceparent"], trace);
    let garbled: Value = send("not-a-trace", "garbled")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        garbled.get("traceparent").is_none(),
        "an invalid one is dropped: {garbled}"
    );

    let records = records_read(&consumer, 2, Duration::from_secs(20)).await;
    assert_eq!(records.len(), 2);
    for record in records {
        let expected = (record.key.as_deref() == Some("traced")).then_some(trace);
        assert_eq!(record.header("traceparent"), expected, "{:?}", record.key);
    }
    env.finish().await;
}

/// The reporter, round by round: the live reconciler with the lowest id
/// reports; any other instance publishes zeros and says it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_live_reconciler_with_the_lowest_id_reports() {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use tickler::roles::membership::Ownership;
    use tickler::roles::reporter::{Reporter, ReporterConfig, ReporterReport};
    let env = start_without_dispatcher().await;
    let sql = env.sql.clone();
    // The running instance registers as it starts.
    let running: u64 = eventually(Duration::from_secs(10), || {
        let sql = sql.clone();
        async move {
            sqlx::query_scalar::<_, u64>("SELECT MIN(id) FROM instances")
                .fetch_one(&sql)
                .await
                .ok()
        }
    })
    .await
    .expect("the instance registered");
    let reporter_as = |instance: u64| {
        let ownership = Ownership {
            instance: Some(instance),
            shards: BTreeMap::new(),
            ttl: env.config.instance_ttl(),
            alive_until: None,
            incarnation: 0,
            readers: Vec::new(),
        };
        Reporter::new(
            env.store.clone(),
            env.index.clone(),
            ReporterConfig::from_config(Arc::new(env.config.clone())),
            tokio::sync::watch::channel(ownership).1,
        )
    };
    let mut reporter = reporter_as(running);
    assert_eq!(
        reporter.run_once(chrono::Utc::now()).await.unwrap(),
        ReporterReport { reporting: true }
    );
    let mut other = reporter_as(running + 1_000);
    assert_eq!(
        other.run_once(chrono::Utc::now()).await.unwrap(),
        ReporterReport { reporting: false }
    );
    env.finish().await;
}

/// The busiest minute ahead of each topic, against what it can take: 120
/// jobs due in one minute an hour out on a topic paced at 2 a second take a
/// minute to produce; the same minute's 30 on a topic without a pace, at
/// `gauges.burst_drain_per_second`, do not. `/v1/stats` names both, the
/// slowest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_busiest_minute_ahead_is_weighed_against_the_topics_pace() {
    let env = TestEnv::start_with(|c| {
        c.roles = vec![Role::Api];
        c.gauges.burst_drain_per_second = 100;
        c.kafka.topic_check = tickler::config::TopicCheck::Off;
    })
    .await;
    let paced = env.topic.clone();
    let other = format!("{paced}-other");
    let (status, _) = env
        .request(
            "PATCH",
            &format!("/v1/topics/{paced}"),
            Some(json!({"max_per_second": 2}).to_string()),
        )
        .await;
    assert_eq!(status, 200);
    let minute = (chrono::Utc::now() + chrono::Duration::hours(1))
        .duration_trunc(chrono::Duration::minutes(1))
        .unwrap();
    let jobs = |topic: &str, n: usize| {
        (0..n)
            .map(|i| json!({"topic": topic, "payload": i, "run_at": (minute + chrono::Duration::milliseconds(i as i64 * 100)).to_rfc3339()}))
            .collect::<Vec<_>>()
    };
    for (topic, n) in [(&paced, 120), (&other, 30)] {
        let (status, answer) = env
            .post("/v1/jobs/batch", json!({"jobs": jobs(topic, n)}))
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    // And a quieter minute later on the paced topic.
    env.job_create(
        json!({"payload": 0, "run_at": (minute + chrono::Duration::minutes(5)).to_rfc3339()}),
    )
    .await;

    let truth =
        tickler::roles::reporter::truth::Truth::compute(&env.store, &env.index, &env.config)
            .await
            .unwrap();
    let found: Vec<(&str, u64, u32, f64)> = truth
        .bursts
        .iter()
        .map(|b| (b.topic.as_str(), b.jobs, b.per_second, b.drain_seconds))
        .collect();
    assert_eq!(
        found,
        vec![
            (paced.as_str(), 120, 2, 60.0),
            (other.as_str(), 30, 100, 0.3)
        ]
    );
    assert_eq!(
        truth.bursts[0].at,
        tickler::domain::job::time_format(minute),
        "the minute it starts"
    );
    let (_, stats) = env.get("/v1/stats").await;
    assert_eq!(stats["bursts"][0]["topic"], paced.as_str(), "{stats}");
    env.finish().await;
}
