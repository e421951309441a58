//! The HTTP API: bad input gets a clear 4xx with a stable code and writes
//! nothing; good input is kept exactly.

use serde_json::{json, Value};
use tickler_testkit::TestEnv;

async fn refused(env: &TestEnv, body: Value) -> (u16, String) {
    let (status, reply) = env.post("/v1/jobs", body).await;
    let code = reply["error"]["code"]
        .as_str()
        .unwrap_or("<none>")
        .to_owned();
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "errors carry a message: {reply}"
    );
    (status, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_stable_4xx_code_and_write_nothing() {
    let env = TestEnv::start_with(|c| c.jobs.payload_max_bytes = 1024).await;
    let topic = env.topic.clone();
    let cases = [
        (json!({"payload": 1, "delay_ms": 10}), 400, "invalid_topic"),
        (
            json!({"topic": "no spaces", "delay_ms": 10}),
            400,
            "invalid_topic",
        ),
        (json!({"topic": 7, "delay_ms": 10}), 400, "invalid_request"),
        (
            json!({"topic": topic, "payload": 1}),
            400,
            "invalid_schedule",
        ),
        (
            json!({"topic": topic, "delay_ms": 10, "run_at": "2030-01-01T00:00:00Z"}),
            400,
            "invalid_schedule",
        ),
        (
            json!({"topic": topic, "run_at": "next tuesday"}),
            400,
            "invalid_run_at",
        ),
        (
            json!({"topic": topic, "run_at": "2030-13-01T00:00:00Z"}),
            400,
            "invalid_run_at",
        ),
        (
            json!({"topic": topic, "run_at": "9999-01-01T00:00:00Z"}),
            400,
            "schedule_too_far",
        ),
        (
            json!({"topic": topic, "delay_ms": 10, "payload": "x".repeat(2000)}),
            413,
            "payload_too_large",
        ),
        (
            json!({"topic": topic, "delay_ms": 10, "payload_base64": "A".repeat(1400)}),
            413,
            "payload_too_large",
        ),
        (
            json!({"topic": topic, "delay_ms": 10, "payload_base64": "%%%"}),
            400,
            "invalid_payload",
        ),
        (
            json!({"topic": topic, "delay_ms": 10, "headers": {"tickler-job-id": "1"}}),
            400,
            "invalid_headers",
        ),
        (
            json!({"topic": topic, "delay_ms": 10, "surprise": true}),
            400,
            "invalid_request",
        ),
    ];
    for (body, status, code) in cases {
        let got = refused(&env, body.clone()).await;
        assert_eq!(got, (status, code.to_owned()), "for {body}");
    }

    // Malformed JSON, a missing content type, and a body over the limit.
    let url = format!("{}/v1/jobs", env.base_url);
    let raw = |body: &'static str, content_type: Option<&'static str>| {
        let mut request = env.http.post(&url).body(body);
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        request.send()
    };
    for (response, status, code) in [
        (
            raw("{\"topic\": ", Some("application/json")).await.unwrap(),
            400,
            "invalid_json",
        ),
        (
            raw("{}", None).await.unwrap(),
            415,
            "unsupported_media_type",
        ),
    ] {
        assert_eq!(response.status().as_u16(), status);
        let reply: Value = response.json().await.unwrap();
        assert_eq!(reply["error"]["code"], code);
    }
    let huge = format!(
        "{{\"topic\":\"{topic}\",\"delay_ms\":1,\"payload\":\"{}\"}}",
        "y".repeat(17 << 20)
    );
    let response = env
        .http
        .post(&url)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let reply: Value = response.json().await.unwrap();
    assert_eq!(reply["error"]["code"], "payload_too_large");

    assert_eq!(env.jobs_count().await, 0, "nothing was written");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_job_reads_back_as_sent() {
    let env = TestEnv::start().await;
    let job = env
        .job_create(json!({
            "key": "invoice-7",
            "payload_base64": "AAECAw==",
            "headers": {"tenant": "acme"},
            "run_at": "2031-06-01T12:00:00.250+02:00",
            "max_attempts": 4,
        }))
        .await;
    let id = job["id"].as_u64().unwrap();
    let (status, got) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(got["topic"], env.topic.as_str());
    assert_eq!(got["key"], "invoice-7");
    assert_eq!(got["status"], "pending");
    assert_eq!(
        got["run_at"], "2031-06-01T10:00:00.250Z",
        "normalised to UTC"
    );
    assert_eq!(got["payload_base64"], "AAECAw==");
    assert_eq!(got["headers"], json!({"tenant": "acme"}));
    assert_eq!(got["attempt"], 1);
    assert_eq!(got["max_attempts"], 4);
    assert_eq!(got["version"], 1);
    assert!(got["kafka"].is_null());

    let stored: chrono::NaiveDateTime =
        sqlx::query_scalar("SELECT schedule_time FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&env.sql)
            .await
            .unwrap();
    assert_eq!(
        stored.to_string(),
        "2031-06-01 10:00:00.250",
        "stored in UTC"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_malformed_ids_are_4xx() {
    let env = TestEnv::start().await;
    let (status, reply) = env.get("/v1/jobs/999999").await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (status, reply) = env.get("/v1/jobs/abc").await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (400, Some("invalid_id"))
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_returns_the_existing_job_and_a_different_request_conflicts() {
    let env = TestEnv::start().await;
    let body = json!({"key": "k1", "payload": {"v": 1}, "run_at": "2032-01-01T00:00:00Z"});
    let first = env.job_create(body.clone()).await;
    let mut again = body.clone();
    again["topic"] = json!(env.topic);
    let (status, second) = env.post("/v1/jobs", again.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(second["id"], first["id"]);

    again["payload"] = json!({"v": 2});
    let (status, reply) = env.post("/v1/jobs", again).await;
    assert_eq!(status, 409);
    assert_eq!(reply["error"]["code"], "key_conflict");
    assert!(reply["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&first["id"].to_string()));
    assert_eq!(env.jobs_count().await, 1);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_answer() {
    let env = TestEnv::start().await;
    let (status, health) = env.get("/healthz").await;
    assert_eq!(status, 200);
    // Up or down, nothing more: anyone may ask.
    assert_eq!(health, json!({"status": "ok"}));
    env.job_create(json!({"payload": 1, "delay_ms": 100_000}))
        .await;
    let (_, text) = env.metrics_text().await;
    assert!(text.contains("tickler_jobs_created_total"), "{text}");
    env.finish().await;
}
