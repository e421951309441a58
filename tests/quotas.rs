//! Quotas per token (#46): the most pending jobs and payload bytes a token
//! may hold. A create past one is 429 `quota_exceeded` and writes nothing;
//! creates racing for the last room get exactly what is left; jobs that
//! leave pending give their room back at the next count; the usage is in
//! `/v1/stats` and `tickler token show`.

use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};
use tickler_testkit::{
    eventually, http_with_token, output, output_text as text, token_create, TestEnv,
};

async fn tickler(env: &TestEnv, args: &[&str]) -> Output {
    let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
    command.args(args);
    output(command).await
}

async fn count(env: &TestEnv, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&env.sql).await.unwrap()
}

async fn create(env: &TestEnv, http: &reqwest::Client, body: Value) -> (u16, Value) {
    env.request_with(http, "POST", "/v1/jobs", Some(body.to_string()))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_past_a_tokens_quota_is_refused_and_writes_nothing() {
    let env = TestEnv::start_with(|c| c.api.quota_recount_ms = 200).await;
    let secret = token_create(
        &env.config.mysql.url,
        "tenant-a",
        &["*"],
        &["read", "write"],
    )
    .await;
    let set = tickler(
        &env,
        &["token", "quota", "tenant-a", "--max-pending-jobs", "5"],
    )
    .await;
    assert!(set.status.success(), "{}", text(&set));
    // Within api.token_refresh_ms (the test's is short) every instance knows.
    tokio::time::sleep(Duration::from_millis(env.config.api.token_refresh_ms + 200)).await;
    let http = http_with_token(&secret);
    let topic = env.topic.clone();
    let job = |n: u32| json!({"topic": topic, "key": format!("k{n}"), "payload": n, "delay_ms": 3_600_000});

    for n in 0..5 {
        let (status, body) = create(&env, &http, job(n)).await;
        assert_eq!(status, 201, "{body}");
    }
    // The same request again: the existing job, charged nothing.
    let (status, body) = create(&env, &http, job(0)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = create(&env, &http, job(5)).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("quota_exceeded")),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("5 pending jobs of its quota of 5"),
        "{message}"
    );
    // A batch past it: refused whole.
    let batch = json!({"jobs": [job(6), job(7)]});
    let (status, body) = env
        .request_with(&http, "POST", "/v1/jobs/batch", Some(batch.to_string()))
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("quota_exceeded")),
        "{body}"
    );
    assert_eq!(
        count(&env, "SELECT COUNT(*) FROM jobs").await,
        5,
        "nothing written"
    );
    assert_eq!(count(&env, "SELECT COUNT(*) FROM job_events").await, 5);

    let (_, stats) = env.request_with(&http, "GET", "/v1/stats", None).await;
    assert_eq!(stats["quota"]["token"], json!("tenant-a"), "{stats}");
    assert_eq!(stats["quota"]["pending_jobs"], json!(5));
    assert_eq!(stats["quota"]["max_pending_jobs"], json!(5));
    assert_eq!(stats["quota"]["max_payload_bytes"], Value::Null);
    // A token without a quota has none in its stats, and pays nothing.
    let (_, admin_stats) = env.get("/v1/stats").await;
    assert_eq!(admin_stats["quota"], Value::Null);
    env.job_create(json!({"payload": 1, "delay_ms": 3_600_000}))
        .await;
    assert_eq!(count(&env, "SELECT COUNT(*) FROM token_jobs").await, 5);

    // Two jobs leave pending: their room comes back at the next count.
    let ids: Vec<u64> = sqlx::query_scalar(
        "SELECT j.id FROM jobs j JOIN token_jobs t ON t.job_id = j.id ORDER BY j.id LIMIT 2",
    )
    .fetch_all(&env.sql)
    .await
    .unwrap();
    for id in &ids {
        let (status, _) = env.request("DELETE", &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(status, 200);
    }
    // Both counted out (a count may fall between the two cancels, and
    // give back one first).
    eventually(Duration::from_secs(10), || async {
        let (_, stats) = env.request_with(&http, "GET", "/v1/stats", None).await;
        (stats["quota"]["pending_jobs"] == json!(3)).then_some(())
    })
    .await
    .expect("room given back by the count");
    let (status, _) = create(&env, &http, job(8)).await;
    assert_eq!(status, 201);
    let (status, _) = create(&env, &http, job(9)).await;
    assert_eq!(status, 201);
    let (status, _) = create(&env, &http, job(10)).await;
    assert_eq!(status, 429, "full again");

    let shown = tickler(&env, &["token", "show", "tenant-a"]).await;
    let shown = text(&shown);
    assert!(shown.contains("pending    5 of 5"), "{shown}");
    assert!(
        shown.contains("bytes      ") && shown.contains("of no limit"),
        "{shown}"
    );
    let audited = count(
        &env,
        "SELECT COUNT(*) FROM audit_log WHERE action = 'token.quota' AND target = 'tenant-a' AND status = 200",
    )
    .await;
    assert_eq!(audited, 1);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_creates_get_exactly_the_room_left_and_bytes_count_too() {
    let env = TestEnv::start().await;
    let secret = token_create(
        &env.config.mysql.url,
        "tenant-b",
        &["*"],
        &["read", "write"],
    )
    .await;
    sqlx::query("UPDATE api_tokens SET max_pending_jobs = 7, max_payload_bytes = 1000 WHERE name = 'tenant-b'")
        .execute(&env.sql)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(env.config.api.token_refresh_ms + 200)).await;
    let http = http_with_token(&secret);
    let mut racing = Vec::new();
    for n in 0..20 {
        let (env_url, http, topic) = (env.base_url.clone(), http.clone(), env.topic.clone());
        racing.push(tokio::spawn(async move {
            http.post(format!("{env_url}/v1/jobs"))
                .json(&json!({"topic": topic, "key": format!("r{n}"), "payload": n, "delay_ms": 3_600_000}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for task in racing {
        statuses.push(task.await.unwrap());
    }
    let created = statuses.iter().filter(|s| **s == 201).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((created, refused), (7, 13), "{statuses:?}");
    assert_eq!(count(&env, "SELECT COUNT(*) FROM jobs").await, 7);

    // Bytes: a fresh token with room for 100 payload bytes.
    let small = token_create(&env.config.mysql.url, "tenant-c", &["*"], &["write"]).await;
    sqlx::query("UPDATE api_tokens SET max_payload_bytes = 100 WHERE name = 'tenant-c'")
        .execute(&env.sql)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(env.config.api.token_refresh_ms + 200)).await;
    let http = http_with_token(&small);
    let sixty = "x".repeat(58); // a JSON string: 60 bytes with its quotes
    let (status, body) = create(
        &env,
        &http,
        json!({"topic": env.topic, "payload": sixty, "delay_ms": 60_000}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = create(
        &env,
        &http,
        json!({"topic": env.topic, "payload": sixty, "delay_ms": 60_000}),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("quota_exceeded")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("60 payload bytes of its quota of 100"),
        "{body}"
    );
    env.finish().await;
}

async fn patch(env: &TestEnv, http: &reqwest::Client, id: u64, body: Value) -> (u16, Value) {
    env.request_with(
        http,
        "PATCH",
        &format!("/v1/jobs/{id}"),
        Some(body.to_string()),
    )
    .await
}

/// `token_usage.payload_bytes` of the token `name`.
async fn bytes_used(env: &TestEnv, name: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT CAST(u.payload_bytes AS SIGNED) FROM token_usage u \
         JOIN api_tokens t ON t.id = u.token_id WHERE t.name = ?",
    )
    .bind(name)
    .fetch_one(&env.sql)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_grown_by_patch_is_charged_and_past_the_quota_refused_writing_nothing() {
    // Compressed at rest: the quota counts payloads as given all the same.
    let env = TestEnv::start_with(|c| {
        c.api.quota_recount_ms = 200;
        c.compression.payloads = tickler::config::PayloadCompression::Zstd;
    })
    .await;
    let secret = token_create(
        &env.config.mysql.url,
        "tenant-p",
        &["*"],
        &["read", "write"],
    )
    .await;
    sqlx::query("UPDATE api_tokens SET max_payload_bytes = 1000 WHERE name = 'tenant-p'")
        .execute(&env.sql)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(env.config.api.token_refresh_ms + 200)).await;
    let http = http_with_token(&secret);
    // Five jobs of 1 byte each: 5 of 1,000.
    let mut ids = Vec::new();
    for n in 0..5 {
        let (status, body) = create(
            &env,
            &http,
            json!({"topic": env.topic, "payload": n, "delay_ms": 3_600_000}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        ids.push(body["id"].as_u64().unwrap());
    }
    // 300 bytes as given (a JSON string with its quotes), a few once
    // compressed.
    let big = json!("x".repeat(298));
    for id in &ids[..3] {
        let (status, body) = patch(&env, &http, *id, json!({"version": 1, "payload": big})).await;
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(bytes_used(&env, "tenant-p").await, 2 + 3 * 300);
    // 902 + 299 would pass 1,000: refused, and nothing written.
    let (status, body) = patch(&env, &http, ids[3], json!({"version": 1, "payload": big})).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("quota_exceeded")),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("902 payload bytes of its quota of 1000; 299 more"),
        "{message}"
    );
    let (_, job) = env.get(&format!("/v1/jobs/{}", ids[3])).await;
    assert_eq!((&job["payload"], &job["version"]), (&json!(3), &json!(1)));
    assert_eq!(bytes_used(&env, "tenant-p").await, 902);
    // Another token changing the job charges the token it counts for.
    let (status, body) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{}", ids[4]),
            Some(json!({"version": 1, "payload": big}).to_string()),
        )
        .await;
    assert_eq!(status, 429, "{body}");

    // The recount adds up the same measure: the figure stays.
    let since: chrono::NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    eventually(Duration::from_secs(10), || async {
        let counted: Option<chrono::NaiveDateTime> =
            sqlx::query_scalar("SELECT MAX(counted_at) FROM token_usage")
                .fetch_one(&env.sql)
                .await
                .unwrap();
        counted.filter(|at| *at > since)
    })
    .await
    .expect("counted again");
    assert_eq!(bytes_used(&env, "tenant-p").await, 902, "as charged");
    let stored: i64 = sqlx::query_scalar(&format!(
        "SELECT CAST(SUM(LENGTH(payload)) AS SIGNED) FROM jobs WHERE id IN ({}, {}, {})",
        ids[0], ids[1], ids[2]
    ))
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert!(stored < 900, "stored compressed: {stored} bytes");

    // A payload shrunk gives its room back at once.
    let (status, body) = patch(&env, &http, ids[0], json!({"version": 2, "payload": 0})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(bytes_used(&env, "tenant-p").await, 603);
    let (status, body) = patch(&env, &http, ids[3], json!({"version": 1, "payload": big})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(bytes_used(&env, "tenant-p").await, 902);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_creates_of_a_token_are_never_refused() {
    // No recount meanwhile: it would make the usage rows first.
    let env = TestEnv::start_with(|c| c.api.quota_recount_ms = 3_600_000).await;
    // Tokens with room to spare and no usage row yet: their quotas are set
    // in SQL, so each one's first creates make the row.
    const TOKENS: usize = 8;
    const AT_ONCE: usize = 4;
    let mut clients = Vec::new();
    for t in 0..TOKENS {
        let secret = token_create(
            &env.config.mysql.url,
            &format!("first-{t}"),
            &["*"],
            &["write"],
        )
        .await;
        clients.push(http_with_token(&secret));
    }
    sqlx::query(
        "UPDATE api_tokens SET max_pending_jobs = 100, max_payload_bytes = 100000 \
         WHERE name LIKE 'first-%'",
    )
    .execute(&env.sql)
    .await
    .unwrap();
    assert_eq!(count(&env, "SELECT COUNT(*) FROM token_usage").await, 0);
    tokio::time::sleep(Duration::from_millis(env.config.api.token_refresh_ms + 200)).await;
    // Built with the fail points, a charge that finds no usage row pauses
    // before it makes one: every create of a token finds none, the race
    // for certain.
    #[cfg(feature = "failpoints")]
    fail::cfg("quota-usage-missing", "return(300)").unwrap();

    let start = std::sync::Arc::new(tokio::sync::Barrier::new(TOKENS * AT_ONCE));
    let mut racing = Vec::new();
    for (t, http) in clients.iter().enumerate() {
        for n in 0..AT_ONCE {
            let (url, http, topic, start) = (
                env.base_url.clone(),
                http.clone(),
                env.topic.clone(),
                start.clone(),
            );
            racing.push(tokio::spawn(async move {
                let request = http
                    .post(format!("{url}/v1/jobs"))
                    .json(&json!({"topic": topic, "key": format!("f{t}-{n}"), "payload": n, "delay_ms": 3_600_000}));
                start.wait().await;
                let response = request.send().await.unwrap();
                (response.status().as_u16(), response.text().await.unwrap())
            }));
        }
    }
    for task in racing {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, 201, "{body}");
    }
    assert_eq!(
        count(
            &env,
            &format!("SELECT COUNT(*) FROM token_usage WHERE pending_jobs = {AT_ONCE}")
        )
        .await,
        TOKENS as i64
    );
    #[cfg(feature = "failpoints")]
    fail::remove("quota-usage-missing");
    assert_eq!(
        count(&env, "SELECT COUNT(*) FROM token_jobs").await,
        (TOKENS * AT_ONCE) as i64
    );
    env.finish().await;
}
