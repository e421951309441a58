//! `GET /v1/forecast`: what falls due, bucket by bucket — the pending jobs
//! exactly, and the occurrences schedules will create, projected — against
//! the real MariaDB, through the API a token reads it with.

use chrono::{DateTime, Duration, DurationRound, Utc};
use serde_json::{json, Value};
use tickler_testkit::{http_with_token, token_create, TestEnv};

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

async fn forecast(env: &TestEnv, query: &str) -> (u16, Value) {
    env.get(&format!("/v1/forecast?{query}")).await
}

fn column(answer: &Value, field: &str) -> Vec<u64> {
    answer["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[field].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forecast_counts_pending_jobs_and_projects_schedules_per_bucket() {
    let env = TestEnv::start().await;
    // A whole hour a day out: the buckets fall on the hour.
    let start = (Utc::now() + Duration::days(1))
        .duration_trunc(Duration::hours(1))
        .unwrap();
    let iso = |d: Duration| (start + d).to_rfc3339();
    for _ in 0..3 {
        env.job_create(json!({"payload": 1, "run_at": iso(Duration::minutes(70))}))
            .await;
    }
    for _ in 0..2 {
        env.job_create(json!({"payload": 2, "run_at": iso(Duration::minutes(140))}))
            .await;
    }
    // Every 30 minutes from the start: its first occurrence is a job at
    // once, the others are to come.
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "half-hourly", "payload": 3,
                   "every_ms": 1_800_000, "start_at": iso(Duration::zero())}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");

    let query = format!(
        "from={}&to={}&bucket=1h",
        urlencode(&iso(Duration::zero())),
        urlencode(&iso(Duration::hours(4)))
    );
    let (status, answer) = forecast(&env, &query).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["bucket_ms"], 3_600_000);
    assert_eq!(at(answer["buckets"][0]["at"].as_str().unwrap()), start);
    assert_eq!(column(&answer, "jobs"), vec![1, 3, 2, 0], "{answer}");
    assert_eq!(column(&answer, "projected"), vec![1, 2, 2, 2], "{answer}");
    assert_eq!(answer["projected_complete"], true);
    let topic = &answer["topics"][0];
    assert_eq!(topic["topic"], env.topic.as_str());
    assert_eq!(
        (topic["jobs"].as_u64(), topic["projected"].as_u64()),
        (Some(6), Some(7))
    );
    assert_eq!(
        at(topic["peak_at"].as_str().unwrap()),
        start + Duration::hours(1)
    );
    assert_eq!(topic["peak"], 5);

    // One topic, and a bucket that does not divide the range: the last
    // bucket counts only what is due before `to`.
    let query = format!(
        "topic={}&from={}&to={}&bucket=90m",
        env.topic,
        urlencode(&iso(Duration::zero())),
        urlencode(&iso(Duration::minutes(130)))
    );
    let (status, answer) = forecast(&env, &query).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        column(&answer, "jobs"),
        vec![4, 0],
        "the 2 at 140m are past it: {answer}"
    );
    assert_eq!(column(&answer, "projected"), vec![2, 2], "{answer}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_range_is_a_400_and_a_token_sees_only_its_topics() {
    let env = TestEnv::start().await;
    env.job_create(json!({"payload": 1, "delay_ms": 3_600_000}))
        .await;
    for (query, why) in [
        ("bucket=500ms", "a bucket under 1s"),
        ("bucket=soon", "not a duration"),
        (
            "from=2030-01-02T00:00:00Z&to=2030-01-01T00:00:00Z",
            "to before from",
        ),
        (
            "from=2030-01-01T00:00:00Z&to=2031-01-01T00:00:00Z&bucket=1m",
            "too many buckets",
        ),
        ("from=tomorrow", "not RFC 3339"),
        ("topic=a%20b", "not a topic name"),
        ("colour=blue", "an unknown parameter"),
    ] {
        let (status, answer) = forecast(&env, query).await;
        assert_eq!(status, 400, "{why}: {answer}");
        assert!(
            answer["error"]["code"]
                .as_str()
                .unwrap()
                .starts_with("invalid_"),
            "{answer}"
        );
    }
    let (status, answer) = forecast(&env, "").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["buckets"].as_array().unwrap().len(),
        24,
        "a day by the hour"
    );
    assert_eq!(
        answer["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["jobs"].as_u64().unwrap())
            .sum::<u64>(),
        1
    );

    let other = format!("{}-other", env.topic);
    let secret = token_create(&env.config.mysql.url, "forecaster", &[&other], &["read"]).await;
    let elsewhere = http_with_token(&secret);
    let (status, answer) = env
        .request_with(&elsewhere, "GET", "/v1/forecast", None)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["topics"].as_array().unwrap().is_empty(),
        "none of its topics: {answer}"
    );
    let path = format!("/v1/forecast?topic={}", env.topic);
    let (status, _) = env.request_with(&elsewhere, "GET", &path, None).await;
    assert_eq!(status, 403);
    env.finish().await;
}

fn urlencode(text: &str) -> String {
    text.replace('+', "%2B").replace(':', "%3A")
}
