//! Traces (#47): with `tracing.otlp_endpoint` set, `tickler serve` sends
//! OTLP spans (HTTP, JSON) for a job's create, the claim, its produce and
//! its result, the job's in the caller's trace (its `traceparent`), with
//! the job's id and topic — to a receiver this test runs.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use tickler_testkit::procs::free_port;
use tickler_testkit::{
    database_create, database_drop, eventually, http_with_token, token_create, unique,
};

type Spans = Arc<Mutex<Vec<Value>>>;

/// An OTLP/HTTP receiver: every span posted to /v1/traces, flattened.
async fn receiver() -> (String, Spans) {
    let spans: Spans = Arc::default();
    let kept = spans.clone();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let mut kept = kept.lock().unwrap();
                for resource in request["resourceSpans"].as_array().into_iter().flatten() {
                    let service = resource["resource"]["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|a| a["key"] == "service.name")
                        .map(|a| a["value"]["stringValue"].clone())
                        .unwrap_or(Value::Null);
                    for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                        for span in scope["spans"].as_array().into_iter().flatten() {
                            let mut span = span.clone();
                            span["service"] = service.clone();
                            kept.push(span);
                        }
                    }
                }
                "{}"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), spans)
}

fn attribute(span: &Value, key: &str) -> Option<String> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| {
            let value = &a["value"];
            value["stringValue"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| value["intValue"].as_str().map(str::to_owned))
                .or_else(|| value["intValue"].as_i64().map(|n| n.to_string()))
                .unwrap_or_default()
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_spans_reach_an_otlp_receiver_in_the_callers_trace() {
    let (endpoint, spans) = receiver().await;
    let (db_name, url) = database_create().await;
    let topic = unique("tickler-test-");
    tickler::kafka::topic_ensure(&tickler_testkit::kafka_brokers(), &topic, 1)
        .await
        .unwrap();
    let tickler = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tickler"));
        command
            .env("TICKLER_MYSQL_URL", &url)
            .env("TICKLER_LOG", "warn");
        command
    };
    assert!(tickler().arg("migrate").status().unwrap().success());
    let secret = token_create(&url, "traced", &["*"], &["write", "read", "results"]).await;
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = tickler()
        .arg("serve")
        .env("TICKLER_REDIS_PREFIX", unique("tickler-t-"))
        .env("TICKLER_API_ADDR", &addr)
        .env("TICKLER_TRACING_OTLP_ENDPOINT", &endpoint)
        .env("TICKLER_TRACING_SERVICE_NAME", "tickler-under-test")
        .env("TICKLER_TRACING_EXPORT_INTERVAL_MS", "200")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let http = http_with_token(&secret);
    let up = eventually(Duration::from_secs(20), || async {
        let answer = http
            .get(format!("http://{addr}/readyz"))
            .send()
            .await
            .ok()?;
        (answer.status() == 200).then_some(())
    })
    .await;
    assert!(up.is_some(), "tickler serves");

    let (trace_id, parent_id) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let created: Value = http
        .post(format!("http://{addr}/v1/jobs"))
        .header("traceparent", format!("00-{trace_id}-{parent_id}-01"))
        .json(&json!({"topic": topic, "payload": 1, "delay_ms": 300, "expects_result": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_u64().expect("created");
    let dispatched = eventually(Duration::from_secs(15), || async {
        let job: Value = http
            .get(format!("http://{addr}/v1/jobs/{id}"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (job["status"] == "dispatched").then_some(())
    })
    .await;
    assert!(dispatched.is_some(), "produced");
    let reported = http
        .post(format!("http://{addr}/v1/jobs/{id}/result"))
        .json(&json!({"attempt": 1, "outcome": "ok"}))
        .send()
        .await
        .unwrap();
    let status = reported.status();
    assert_eq!(status, 200, "{}", reported.text().await.unwrap());

    let named = |name: &'static str| {
        let spans = spans.clone();
        move || {
            spans
                .lock()
                .unwrap()
                .iter()
                .find(|s| s["name"] == name && attribute(s, "job.id") == Some(id.to_string()))
                .cloned()
        }
    };
    let all = eventually(Duration::from_secs(15), || {
        let found = (
            named("job.create")(),
            named("job.produce")(),
            named("job.result")(),
        );
        async move {
            match found {
                (Some(create), Some(produce), Some(result)) => Some((create, produce, result)),
                _ => None,
            }
        }
    })
    .await;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let (create, produce, result) =
        all.unwrap_or_else(|| panic!("the three spans of job {id}: {:#?}", spans.lock().unwrap()));
    for span in [&create, &produce, &result] {
        assert_eq!(span["traceId"], trace_id, "in the caller's trace: {span}");
        assert_eq!(
            attribute(span, "job.topic").as_deref(),
            Some(topic.as_str()),
            "{span}"
        );
        assert_eq!(span["service"], "tickler-under-test");
    }
    assert_eq!(
        create["parentSpanId"], parent_id,
        "the create is the caller's child"
    );
    assert_eq!(
        produce["parentSpanId"], parent_id,
        "as the record's traceparent says"
    );
    assert!(attribute(&produce, "kafka.offset").is_some(), "{produce}");
    let claims = spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == "dispatch.claim")
        .count();
    assert!(claims > 0, "the claim passes are spans too");
    database_drop(&db_name).await;
}
