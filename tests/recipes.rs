//! The SQL repair recipes of docs/schema.md, run exactly as written
//! there (with the example job id and time replaced), against a running
//! tickler: each must be honoured without a restart.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use tickler_testkit::{records_read, TestEnv};

/// The SQL block following `<!-- recipe: NAME -->` in docs/schema.md.
fn recipe(name: &str) -> String {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schema.md")).unwrap();
    let marker = format!("<!-- recipe: {name} -->");
    let after = &doc[doc
        .find(&marker)
        .unwrap_or_else(|| panic!("recipe {name} is documented"))..];
    let start = after.find("```sql\n").unwrap() + "```sql\n".len();
    let end = after[start..].find("```").unwrap();
    after[start..start + end].to_owned()
}

/// Runs a recipe for job `id`, at `run_at` where it takes a time.
async fn run(env: &TestEnv, name: &str, id: u64, run_at: Option<chrono::DateTime<Utc>>) -> u64 {
    let mut sql = recipe(name).replace("id = 17", &format!("id = {id}"));
    if let Some(at) = run_at {
        sql = sql.replace(
            "'2030-01-31 09:00:00.000'",
            &format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.3f")),
        );
    }
    assert!(
        !sql.contains("id = 17") && !sql.contains("'2030-"),
        "every example value replaced: {sql}"
    );
    let mut conn = env.sql.acquire().await.unwrap();
    // The doc's first instruction for hand edits.
    sqlx::query("SET time_zone = '+00:00'")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(&sql)
        .execute(&mut *conn)
        .await
        .unwrap()
        .rows_affected()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_cancel_keeps_an_indexed_job_from_being_produced() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"key": "doomed", "payload": 1, "delay_ms": 1200}))
        .await;
    let id = job["id"].as_u64().unwrap();
    assert!(env.redis_holds(id).await);
    assert_eq!(run(&env, "cancel", id, None).await, 1);
    env.job_create(json!({"key": "witness", "payload": 2, "delay_ms": 1500}))
        .await;
    let records = records_read(&consumer, 2, Duration::from_secs(6)).await;
    let keys: Vec<_> = records.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, vec!["witness"]);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_move_later_is_never_produced_at_the_old_time() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 1000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let new_at = Utc::now() + chrono::Duration::milliseconds(4000);
    assert_eq!(run(&env, "move", id, Some(new_at)).await, 1);
    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(records.len(), 1);
    let dispatched: i64 = records[0]
        .header("tickler-dispatched-at")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        dispatched >= new_at.timestamp_millis(),
        "not before the new time"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_move_earlier_fires_at_the_new_time() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 300_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let new_at = Utc::now() + chrono::Duration::milliseconds(1000);
    assert_eq!(run(&env, "move", id, Some(new_at)).await, 1);
    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(
        records.len(),
        1,
        "fired at its new time, not in five minutes"
    );
    let dispatched: i64 = records[0]
        .header("tickler-dispatched-at")
        .unwrap()
        .parse()
        .unwrap();
    assert!(dispatched >= new_at.timestamp_millis());
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_requeue_produces_a_dispatched_job_again_as_its_next_attempt() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let job = env.job_create(json!({"payload": 1, "delay_ms": 0})).await;
    let id = job["id"].as_u64().unwrap();
    records_read(&consumer, 1, Duration::from_secs(10)).await;
    env.status_await(id, "dispatched", Duration::from_secs(5))
        .await;
    assert_eq!(run(&env, "requeue", id, None).await, 1);
    let again = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(again.len(), 1, "produced again");
    assert_eq!(again[0].header("tickler-attempt"), Some("2"));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_release_frees_a_stuck_claim_at_once() {
    // A long lease, so only the recipe can free the claim in time.
    let env = TestEnv::start_with(|c| c.dispatcher.claim_lease_ms = 600_000).await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 600_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    sqlx::query(
        "UPDATE jobs SET status = 'dispatching', claim_token = 1, schedule_time = UTC_TIMESTAMP(3), \
         claim_expires_at = UTC_TIMESTAMP(3) + INTERVAL 10 MINUTE WHERE id = ?",
    )
    .bind(id)
    .execute(&env.sql)
    .await
    .unwrap();
    assert_eq!(run(&env, "release", id, None).await, 1);
    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(records.len(), 1, "produced without waiting for the lease");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_redrive_produces_a_dead_job_again_with_a_fresh_budget() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 0, "expects_result": true, "max_attempts": 1}))
        .await;
    let id = job["id"].as_u64().unwrap();
    records_read(&consumer, 1, Duration::from_secs(10)).await;
    let (status, body) = env
        .post(
            &format!("/v1/jobs/{id}/result"),
            json!({"attempt": 1, "outcome": "failed", "error": "bad"}),
        )
        .await;
    assert_eq!(body["job"]["status"], "dead", "{status} {body}");
    assert_eq!(run(&env, "redrive", id, None).await, 1);
    let again = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(again.len(), 1, "produced again");
    assert_eq!(again[0].header("tickler-attempt"), Some("2"));
    let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["max_attempts"], 4, "attempts 2, 3 and 4 to go: {job}");
    // A retry of the redriven attempt is a retry, not a death (a minute
    // ahead, so no dispatcher claims it before we look).
    let (_, body) = env
        .post(
            &format!("/v1/jobs/{id}/result"),
            json!({"attempt": 2, "outcome": "retry", "retry_after_ms": 60_000}),
        )
        .await;
    assert_eq!(body["job"]["status"], "pending", "{body}");
    assert_eq!(body["job"]["attempt"], 3, "{body}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipe_policy_makes_a_pending_job_wait_for_its_result() {
    let env = TestEnv::start_with(|c| c.reconciler.interval_ms = 200).await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 1500}))
        .await;
    let id = job["id"].as_u64().unwrap();
    assert_eq!(job["expects_result"], false);
    assert_eq!(run(&env, "policy", id, None).await, 1);
    records_read(&consumer, 1, Duration::from_secs(10)).await;
    env.status_await(id, "dispatched", Duration::from_secs(5))
        .await;
    let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
    assert!(job["ack_deadline"].is_string(), "waits for a result: {job}");
    let (_, body) = env
        .post(
            &format!("/v1/jobs/{id}/result"),
            json!({"attempt": 1, "outcome": "ok"}),
        )
        .await;
    assert_eq!(body["job"]["status"], "succeeded", "{body}");
    env.finish().await;
}
