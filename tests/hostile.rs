//! Requests a hostile but realistic caller sends: each gets a JSON 4xx with
//! a stable code, nothing is written on refusal, and keys match byte for
//! byte. One test per defect found against the first release.

use serde_json::{json, Value};
use tickler_testkit::TestEnv;

/// Asserts that `method path` (with `body`) is refused with `status` and
/// the error `expected`.
async fn assert_refused(
    env: &TestEnv,
    method: &str,
    path: &str,
    body: Option<String>,
    status: u16,
    expected: &str,
) {
    let (got, reply) = env.request(method, path, body).await;
    assert_eq!(
        (got, code(&reply)),
        (status, expected),
        "{method} {path}: {reply}"
    );
}

fn code(reply: &Value) -> &str {
    reply["error"]["code"].as_str().unwrap_or("<no JSON error>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_filters_outside_the_datetime_range_are_refused_not_a_panic() {
    let env = TestEnv::start().await;
    for query in [
        "run_at_from=0000-01-01T00:00:00%2B00:01",
        "run_at_to=0000-01-01T00:00:00%2B00:01",
        "run_at_from=1969-12-31T23:59:59Z",
        "run_at_to=9999-12-31T23:59:59-01:00",
    ] {
        assert_refused(
            &env,
            "GET",
            &format!("/v1/jobs?{query}"),
            None,
            400,
            "invalid_request",
        )
        .await;
    }
    let (status, _) = env
        .request("GET", "/v1/jobs?run_at_from=1970-01-01T00:00:00Z", None)
        .await;
    assert_eq!(status, 200, "the edge of the range is fine");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_no_job_can_match_are_4xx_not_a_collation_error() {
    let env = TestEnv::start().await;
    let (status, reply) = env.request("GET", "/v1/jobs?topic=%C3%A9", None).await;
    assert_eq!((status, code(&reply)), (400, "invalid_topic"));
    let (status, reply) = env.request("GET", "/v1/jobs?key=", None).await;
    assert_eq!((status, code(&reply)), (400, "invalid_key"));
    // A non-ASCII key is a key like any other.
    env.job_create(json!({"key": "clé-é", "payload": 1, "delay_ms": 600_000}))
        .await;
    let (status, reply) = env
        .request("GET", "/v1/jobs?key=cl%C3%A9-%C3%A9", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(reply["jobs"].as_array().unwrap().len(), 1);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_are_refused_per_item_and_the_rest_of_a_batch_is_created() {
    let env = TestEnv::start().await;
    let big = json!({"h": "x".repeat(70_000)});
    let body = json!({"topic": env.topic, "headers": big, "delay_ms": 1000});
    assert_refused(
        &env,
        "POST",
        "/v1/jobs",
        Some(body.to_string()),
        400,
        "invalid_headers",
    )
    .await;
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 600_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let (status, reply) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{id}"),
            Some(json!({"version": 1, "headers": big}).to_string()),
        )
        .await;
    assert_eq!((status, code(&reply)), (400, "invalid_headers"));

    let batch = json!({"jobs": [
        {"topic": env.topic, "payload": 1, "delay_ms": 600_000},
        {"topic": env.topic, "headers": big, "delay_ms": 600_000},
        {"topic": env.topic, "payload": 3, "delay_ms": 600_000},
    ]});
    let (status, reply) = env.post("/v1/jobs/batch", batch).await;
    assert_eq!(status, 200, "{reply}");
    let results: Vec<&str> = reply["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["created", "error", "created"]);
    assert_eq!(reply["results"][1]["error"]["code"], "invalid_headers");
    assert_eq!(env.jobs_count().await, 3);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_differ_only_by_trailing_spaces_are_different_jobs() {
    let env = TestEnv::start().await;
    let body = |key: &str| json!({"key": key, "payload": 1, "run_at": "2031-01-01T00:00:00Z"});
    let first = env.job_create(body("acct-7")).await;
    let second = env.job_create(body("acct-7 ")).await;
    assert_ne!(first["id"], second["id"], "a new job, not the existing one");
    assert_eq!(second["key"], "acct-7 ");
    let (_, again) = env
        .post("/v1/jobs", {
            let mut b = body("acct-7 ");
            b["topic"] = json!(env.topic);
            b
        })
        .await;
    assert_eq!(again["id"], second["id"], "the same key finds its own job");

    for (query, expect) in [("acct-7", &first), ("acct-7%20", &second)] {
        let (_, reply) = env
            .request("GET", &format!("/v1/jobs?key={query}"), None)
            .await;
        let ids: Vec<&Value> = reply["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| &j["id"])
            .collect();
        assert_eq!(ids, [&expect["id"]], "key={query}");
    }
    let (_, reply) = env.request("GET", "/v1/jobs?key=acct-7%20%20", None).await;
    assert_eq!(reply["jobs"].as_array().unwrap().len(), 0);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_keeps_json_payloads_byte_for_byte() {
    let env = TestEnv::start().await;
    let payload = r#"{"z":1,"a":12345678901234567890123,"f":1.10,"e":1e2}"#;
    let body = format!(
        r#"{{"jobs":[{{"topic":"{}","key":"p","payload":{payload},"run_at":"2031-01-01T00:00:00Z"}}]}}"#,
        env.topic
    );
    let (status, reply) = env.request("POST", "/v1/jobs/batch", Some(body)).await;
    assert_eq!(status, 200, "{reply}");
    let id = reply["results"][0]["id"].as_u64().unwrap();
    let stored: Vec<u8> = sqlx::query_scalar("SELECT payload FROM jobs WHERE id = ?")
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(String::from_utf8(stored).unwrap(), payload);
    // The same text through single create is the same request.
    let single = format!(
        r#"{{"topic":"{}","key":"p","payload":{payload},"run_at":"2031-01-01T00:00:00Z"}}"#,
        env.topic
    );
    let (status, reply) = env.request("POST", "/v1/jobs", Some(single)).await;
    assert_eq!((status, reply["id"].as_u64()), (200, Some(id)));
    env.finish().await;
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_depth_has_one_limit_on_every_endpoint_per_item() {
    let env = TestEnv::start().await;
    let create = |payload: &str| {
        format!(
            r#"{{"topic":"{}","payload":{payload},"delay_ms":600000}}"#,
            env.topic
        )
    };
    let (status, _) = env
        .request("POST", "/v1/jobs", Some(create(&nested(64))))
        .await;
    assert_eq!(status, 201, "64 levels are allowed");
    for depth in [65, 200, 100_000] {
        let (status, reply) = env
            .request("POST", "/v1/jobs", Some(create(&nested(depth))))
            .await;
        assert_eq!((status, code(&reply)), (400, "invalid_payload"), "{depth}");
    }
    let batch = format!(r#"{{"jobs":[{},{}]}}"#, create(&nested(200)), create("1"));
    let (status, reply) = env.request("POST", "/v1/jobs/batch", Some(batch)).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["results"][0]["error"]["code"], "invalid_payload");
    assert_eq!(reply["results"][1]["result"], "created");
    let id = reply["results"][1]["id"].as_u64().unwrap();
    let (status, reply) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{id}"),
            Some(format!(r#"{{"version":1,"payload":{}}}"#, nested(65))),
        )
        .await;
    assert_eq!((status, code(&reply)), (400, "invalid_payload"));
    assert_eq!(env.jobs_count().await, 2);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_the_json_error_shape() {
    let env = TestEnv::start_with(|c| c.jobs.payload_max_bytes = 1024).await;
    let (status, reply) = env.request("GET", "/v2/nothing", None).await;
    assert_eq!((status, code(&reply)), (404, "no_route"));
    let (status, reply) = env.request("PUT", "/v1/jobs", Some("{}".to_owned())).await;
    assert_eq!((status, code(&reply)), (405, "method_not_allowed"));
    let (status, reply) = env
        .request(
            "GET",
            &format!("/v1/jobs?topic={}", "a".repeat(20_000)),
            None,
        )
        .await;
    assert_eq!((status, code(&reply)), (414, "uri_too_long"));

    let response = env
        .http
        .get(format!("{}/v1/jobs", env.base_url))
        .header("x-big", "v".repeat(70_000))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 431);
    let reply: Value = response.json().await.unwrap();
    assert_eq!(code(&reply), "headers_too_large");

    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 600_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let huge = format!(r#"{{"max_attempts":1,"pad":"{}"}}"#, "x".repeat(17 << 20));
    let (status, reply) = env
        .request("POST", &format!("/v1/jobs/{id}/redrive"), Some(huge))
        .await;
    assert_eq!((status, code(&reply)), (413, "payload_too_large"));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_id_has_one_spelling() {
    let env = TestEnv::start().await;
    let mut id = 0;
    while id < 5 {
        id = env
            .job_create(json!({"payload": 1, "delay_ms": 600_000}))
            .await["id"]
            .as_u64()
            .unwrap();
    }
    for path in [
        "0",
        "+5",
        "%2B5",
        "05",
        "00000000000000000000001",
        "-1",
        "18446744073709551616",
        "%FF",
    ] {
        for method in ["GET", "DELETE"] {
            let path = format!("/v1/jobs/{path}");
            assert_refused(&env, method, &path, None, 400, "invalid_id").await;
        }
    }
    assert_eq!(
        env.job_status(5).await,
        "pending",
        "nothing cancelled job 5"
    );
    let (status, _) = env.request("GET", "/v1/jobs/5", None).await;
    assert_eq!(status, 200);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_payload_is_refused_on_create_and_patch() {
    let env = TestEnv::start().await;
    let body = json!({"topic": env.topic, "payload": null, "delay_ms": 10});
    assert_refused(
        &env,
        "POST",
        "/v1/jobs",
        Some(body.to_string()),
        400,
        "invalid_payload",
    )
    .await;
    assert_eq!(env.jobs_count().await, 0);
    let job = env
        .job_create(json!({"payload": {"a": 1}, "delay_ms": 600_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let (status, reply) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{id}"),
            Some(r#"{"version":1,"payload":null}"#.to_owned()),
        )
        .await;
    assert_eq!((status, code(&reply)), (400, "invalid_payload"));
    let (_, got) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(
        (got["version"].as_u64(), &got["payload"]),
        (Some(1), &json!({"a": 1}))
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_topic_is_refused_at_create_unless_configured_otherwise() {
    let env = TestEnv::start().await;
    let missing = tickler_testkit::unique("tickler-missing-");
    let (status, reply) = env
        .post(
            "/v1/jobs",
            json!({"topic": missing, "payload": 1, "delay_ms": 10}),
        )
        .await;
    assert_eq!((status, code(&reply)), (400, "unknown_topic"));
    let batch = json!({"jobs": [
        {"topic": missing, "payload": 1, "delay_ms": 10},
        {"topic": env.topic, "payload": 2, "delay_ms": 600_000},
    ]});
    let (_, reply) = env.post("/v1/jobs/batch", batch).await;
    assert_eq!(reply["results"][0]["error"]["code"], "unknown_topic");
    assert_eq!(reply["results"][1]["result"], "created");
    assert_eq!(env.jobs_count().await, 1);

    // Created on the broker a moment ago: found without waiting for the
    // periodic refresh.
    tickler::kafka::topic_ensure(&env.config.kafka.brokers, &missing, 1)
        .await
        .unwrap();
    let found = tickler_testkit::eventually(std::time::Duration::from_secs(5), || async {
        let (status, _) = env
            .post(
                "/v1/jobs",
                json!({"topic": missing, "payload": 1, "delay_ms": 600_000}),
            )
            .await;
        (status == 201).then_some(())
    })
    .await;
    assert!(found.is_some(), "a new topic is accepted within seconds");
    env.finish().await;

    let env =
        TestEnv::start_with(|c| c.kafka.topic_check = tickler::config::TopicCheck::Warn).await;
    let (status, _) = env
        .post(
            "/v1/jobs",
            json!({"topic": tickler_testkit::unique("tickler-missing-"), "payload": 1, "delay_ms": 600_000}),
        )
        .await;
    assert_eq!(status, 201, "warn accepts");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_topics_are_refused_and_nothing_is_written() {
    let env = TestEnv::start_with(|c| {
        c.jobs.dead_letter_topic = Some("tickler-test-dead".to_owned());
        c.jobs.topics_allowed = vec!["tickler-test-*".to_owned()];
    })
    .await;
    // A job on the results topic would be read as a report about another
    // job: {"job_id": 1, "attempt": 1, "outcome": "failed"}.
    let forged = json!({"job_id": 1, "attempt": 1, "outcome": "failed"});
    for topic in [
        env.config.results.topic.as_str(),
        "tickler-test-dead",
        "__consumer_offsets",
        "payments",
    ] {
        let body = json!({"topic": topic, "payload": forged, "delay_ms": 0});
        assert_refused(
            &env,
            "POST",
            "/v1/jobs",
            Some(body.to_string()),
            400,
            "reserved_topic",
        )
        .await;
        let batch = json!({"jobs": [body]});
        let (status, reply) = env.post("/v1/jobs/batch", batch).await;
        assert_eq!(status, 200);
        assert_eq!(
            reply["results"][0]["error"]["code"], "reserved_topic",
            "{topic}"
        );
    }
    assert_eq!(env.jobs_count().await, 0);
    env.job_create(json!({"payload": 1, "delay_ms": 600_000}))
        .await;
    env.finish().await;
}
