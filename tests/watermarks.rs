//! Due-time watermarks: per topic, the instant T such that every job due at
//! or before T is done with. It never passes a job a paused topic holds or
//! a claim in doubt, and only ever rises — against the real MariaDB, with
//! the reconciler role raising it as it runs.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use tickler_testkit::{eventually, TestEnv};

async fn started() -> TestEnv {
    TestEnv::start_with(|c| {
        c.reconciler.watermark_interval_ms = 100;
        c.reconciler.watermark_settle_ms = 200;
        // The doubt test's topic is never produced to.
        c.kafka.topic_check = tickler::config::TopicCheck::Off;
    })
    .await
}

async fn watermark(env: &TestEnv, topic: &str) -> Option<DateTime<Utc>> {
    let (status, view) = env.get(&format!("/v1/topics/{topic}")).await;
    assert_eq!(status, 200, "{view}");
    view["watermark"].as_str().map(|at| {
        DateTime::parse_from_rfc3339(at)
            .unwrap()
            .with_timezone(&Utc)
    })
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watermark_waits_for_a_paused_topics_job_then_passes_it() {
    let env = started().await;
    let topic = env.topic.clone();
    let (status, _) = env
        .post(&format!("/v1/topics/{topic}/pause"), json!({}))
        .await;
    assert_eq!(status, 200);
    let job = env.job_create(json!({"payload": 1, "delay_ms": 300})).await;
    let due = at(job["run_at"].as_str().unwrap());
    // Due, held: the watermark stands just before it, however long.
    let held = eventually(Duration::from_secs(10), || async {
        watermark(&env, &topic)
            .await
            .filter(|mark| *mark == due - chrono::Duration::milliseconds(1))
    })
    .await;
    assert!(held.is_some(), "held just before the paused job");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(watermark(&env, &topic).await, held, "still held");

    let (status, _) = env
        .post(&format!("/v1/topics/{topic}/resume"), json!({}))
        .await;
    assert_eq!(status, 200);
    let passed = eventually(Duration::from_secs(10), || async {
        watermark(&env, &topic).await.filter(|mark| *mark >= due)
    })
    .await;
    assert!(passed.is_some(), "past the job once it is produced");
    assert_eq!(
        env.job_status(job["id"].as_u64().unwrap()).await,
        "dispatched"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_doubt_holds_the_watermark_and_it_never_goes_back() {
    let env = started().await;
    let topic = format!("{}-doubt", env.topic);
    let job = env
        .job_create(json!({"topic": topic, "payload": 1, "delay_ms": 3_600_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    assert_eq!(
        watermark(&env, &topic).await,
        None,
        "nothing of it has fallen due"
    );
    // A claim in doubt, as a dead instance leaves one: due ten seconds ago.
    let due: DateTime<Utc> =
        sqlx::query_scalar("SELECT TIMESTAMPADD(SECOND, -10, UTC_TIMESTAMP(3))")
            .fetch_one(&env.sql)
            .await
            .map(|at: chrono::NaiveDateTime| at.and_utc())
            .unwrap();
    sqlx::query(
        "UPDATE jobs SET status = 'dispatching', claimed_by = NULL, schedule_time = ?, \
         version = version + 1 WHERE id = ?",
    )
    .bind(due.naive_utc())
    .bind(id)
    .execute(&env.sql)
    .await
    .unwrap();
    let held = eventually(Duration::from_secs(10), || async {
        watermark(&env, &topic).await
    })
    .await;
    assert_eq!(held, Some(due - chrono::Duration::milliseconds(1)));
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(watermark(&env, &topic).await, held, "held while in doubt");

    // Settled: the watermark goes on, near now.
    sqlx::query("UPDATE jobs SET status = 'dispatched', version = version + 1 WHERE id = ?")
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    let moved = eventually(Duration::from_secs(10), || async {
        watermark(&env, &topic)
            .await
            .filter(|mark| *mark > due + chrono::Duration::seconds(5))
    })
    .await
    .expect("past the settled claim");
    // A job set back into the past by hand does not pull it back.
    sqlx::query(
        "UPDATE jobs SET status = 'pending', schedule_time = ?, version = version + 1 WHERE id = ?",
    )
    .bind(due.naive_utc())
    .bind(id)
    .execute(&env.sql)
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        watermark(&env, &topic).await >= Some(moved),
        "never goes back"
    );
    let (_, metrics) = env.metrics_text().await;
    assert!(
        metrics.contains(&format!(
            "tickler_watermark_lag_seconds{{topic=\"{topic}\"}}"
        )),
        "the gauge names the topic"
    );
    env.finish().await;
}
