//! The notify webhook: the reporter instance posts when jobs end dead and
//! when a backlog builds up and clears; a webhook that fails gets the same
//! news again until it takes it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use tickler::config::Role;
use tickler_testkit::{eventually, TestEnv};

/// A webhook receiver that refuses its first `refuse` posts (503), then
/// keeps every body.
async fn receiver(refuse: usize) -> (String, Arc<Mutex<Vec<Value>>>) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(Mutex::new(0));
    let kept = bodies.clone();
    let app = Router::new().route(
        "/hook",
        post(move |Json(body): Json<Value>| {
            let kept = kept.clone();
            let refused = refused.clone();
            async move {
                let mut refused = refused.lock().unwrap();
                if *refused < refuse {
                    *refused += 1;
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
                kept.lock().unwrap().push(body);
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, bodies)
}

async fn event(bodies: &Arc<Mutex<Vec<Value>>>, name: &str) -> Value {
    eventually(Duration::from_secs(20), || async {
        bodies
            .lock()
            .unwrap()
            .iter()
            .find(|b| b["event"] == name)
            .cloned()
    })
    .await
    .unwrap_or_else(|| panic!("no {name} notification; got {:?}", bodies.lock().unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_jobs_and_a_backlog_reach_the_webhook_even_after_it_failed() {
    let (url, bodies) = receiver(2).await;
    // No dispatcher: a due job stays overdue.
    let env = TestEnv::start_with(|c| {
        c.roles = vec![Role::Api, Role::Loader, Role::Reconciler];
        c.gauges.interval_ms = 1_000;
        c.gauges.counts_interval_ms = 1_000;
        c.notify.webhook_url = Some(url);
        c.notify.backlog_ms = 1_000;
    })
    .await;
    let late = env.job_create(json!({"key": "late", "delay_ms": 0})).await["id"]
        .as_u64()
        .unwrap();
    let doomed = env
        .job_create(json!({"key": "doomed", "delay_ms": 3_600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    sqlx::query("UPDATE jobs SET status = 'dead', last_error = 'gave up' WHERE id = ?")
        .bind(doomed)
        .execute(&env.sql)
        .await
        .unwrap();

    let dead = event(&bodies, "dead_jobs").await;
    assert_eq!(dead["count"], 1, "{dead}");
    assert_eq!(dead["topics"][0]["topic"], env.topic);
    assert_eq!(dead["topics"][0]["ids"], json!([doomed]));
    assert!(
        dead["text"].as_str().unwrap().contains("1 jobs ended dead"),
        "{dead}"
    );

    let backlog = event(&bodies, "backlog").await;
    assert_eq!(backlog["overdue"], 1, "{backlog}");
    assert!(backlog["oldest_age_ms"].as_u64().unwrap() >= 1_000);

    // The backlog clears: said once.
    sqlx::query("UPDATE jobs SET status = 'cancelled' WHERE id = ?")
        .bind(late)
        .execute(&env.sql)
        .await
        .unwrap();
    event(&bodies, "backlog_cleared").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let said = |name: &str| {
        bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| b["event"] == name)
            .count()
    };
    assert_eq!(
        (said("dead_jobs"), said("backlog"), said("backlog_cleared")),
        (1, 1, 1)
    );
    let (_, metrics) = env.metrics_text().await;
    assert!(
        metrics.contains("tickler_notify_failed_total"),
        "the refusals are counted"
    );
    env.finish().await;
}
