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
    let topic = env.topic.clone();
    // Held by a pause first, so that the claim below is the topic's first
    // due job: due ten seconds ago, created so (a past time fires at once).
    let (status, _) = env
        .post(&format!("/v1/topics/{topic}/pause"), json!({}))
        .await;
    assert_eq!(status, 200);
    let due = Utc::now() - chrono::Duration::seconds(10);
    let job = env
        .job_create(json!({"payload": 1, "run_at": due.to_rfc3339()}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let due = at(job["run_at"].as_str().unwrap());
    // A claim in doubt, as a dead instance leaves one (read back in an
    // hour: nothing settles it meanwhile); then the pause ends.
    sqlx::query(
        "UPDATE jobs SET status = 'dispatching', claimed_by = NULL, \
         claim_expires_at = TIMESTAMPADD(HOUR, 1, UTC_TIMESTAMP(3)), version = version + 1 \
         WHERE id = ?",
    )
    .bind(id)
    .execute(&env.sql)
    .await
    .unwrap();
    let (status, _) = env
        .post(&format!("/v1/topics/{topic}/resume"), json!({}))
        .await;
    assert_eq!(status, 200);
    let held = eventually(Duration::from_secs(10), || async {
        watermark(&env, &topic)
            .await
            .filter(|mark| *mark == due - chrono::Duration::milliseconds(1))
    })
    .await;
    assert!(held.is_some(), "held just before the claim in doubt");
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

/// With `reconciler.watermark_topic`, each rise is a record there: keyed by
/// the target topic, with the instant and every partition's end — past the
/// offset of each job due at or before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watermark_is_produced_with_each_partitions_end() {
    let marks_topic = tickler_testkit::unique("tickler-watermarks-");
    let marks = marks_topic.clone();
    let env = TestEnv::start_with(move |c| {
        c.reconciler.watermark_interval_ms = 100;
        c.reconciler.watermark_settle_ms = 200;
        c.reconciler.watermark_topic = Some(marks);
    })
    .await;
    let job = env.job_create(json!({"payload": 1, "delay_ms": 200})).await;
    let id = job["id"].as_u64().unwrap();
    let due = at(job["run_at"].as_str().unwrap());
    let sent = eventually(Duration::from_secs(10), || async {
        let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
        job["kafka"]["offset"]
            .as_i64()
            .map(|offset| (job["kafka"]["partition"].as_i64().unwrap(), offset))
    })
    .await
    .expect("produced");

    let reader = tickler_testkit::consumer_from_beginning(&env.config.kafka.brokers, &marks_topic);
    let found = eventually(Duration::from_secs(20), || async {
        let records = tickler_testkit::records_read(&reader, 1, Duration::from_millis(500)).await;
        records.into_iter().find_map(|record| {
            let value: serde_json::Value = serde_json::from_slice(&record.payload).ok()?;
            let mark = at(value["watermark"].as_str()?);
            (record.key.as_deref() == Some(env.topic.as_str()) && mark >= due).then_some(value)
        })
    })
    .await
    .expect("a watermark record past the job");
    assert_eq!(found["topic"], env.topic.as_str());
    let end = found["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["partition"].as_i64() == Some(sent.0))
        .and_then(|p| p["end_offset"].as_i64())
        .expect("the job's partition");
    assert!(
        end > sent.1,
        "the job's record lies before the end: {found}"
    );
    env.finish().await;
}
