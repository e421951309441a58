//! Proof of delivery (#59): every dispatched job's record is read back at
//! the position the broker acknowledged it at. Found, the job shows
//! `verified_at`; not there (here: its topic deleted and made again), it is
//! produced again as the next attempt and counted. Rows the verifier was
//! never handed (written by a build without verification, or before it)
//! are found by the sweep; a row whose position was edited into nonsense
//! costs only itself.

use std::time::Duration;

use rdkafka::producer::FutureRecord;
use serde_json::{json, Value};
use tickler::domain::delivery::Verify;
use tickler::roles::verifier::{Verifier, VerifierConfig};
use tickler_testkit::{consumer_from_beginning, eventually, producer, records_read, TestEnv};
use tokio_util::sync::CancellationToken;

async fn job(env: &TestEnv, id: u64) -> Value {
    let (status, job) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(status, 200, "{job}");
    job
}

/// Waits until job `id` satisfies `check`; its view then.
async fn job_await(
    env: &TestEnv,
    id: u64,
    wait: Duration,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let found = eventually(wait, || async {
        let job = job(env, id).await;
        check(&job).then_some(job)
    })
    .await;
    match found {
        Some(job) => job,
        None => panic!("job {id} never got there: {}", job(env, id).await),
    }
}

/// A verifier of `env`'s deployment whose sweep looks at every row at once.
fn sweeping_verifier(env: &TestEnv) -> CancellationToken {
    let mut config = VerifierConfig::from_config(&env.config);
    config.verify = Verify::All;
    config.sweep_after = Duration::ZERO;
    config.sweep_every = Duration::from_millis(300);
    let (verifier, _feed) = Verifier::new(env.store.clone(), env.index.clone(), config);
    let stop = CancellationToken::new();
    tokio::spawn(verifier.run(stop.clone()));
    stop
}

async fn metric(env: &TestEnv, name: &str) -> f64 {
    let (_, text) = env.metrics_text().await;
    text.lines()
        .filter(|line| line.starts_with(name))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dispatched_job_is_verified_on_its_topic() {
    let env = TestEnv::start().await;
    let mut ids = Vec::new();
    for n in 0..20 {
        let created = env.job_create(json!({"payload": n, "delay_ms": 0})).await;
        ids.push(created["id"].as_u64().unwrap());
    }
    for id in &ids {
        let job = job_await(&env, *id, Duration::from_secs(20), |job| {
            job["verified_at"].is_string()
        })
        .await;
        assert_eq!(job["status"], "dispatched", "{job}");
        assert!(job["kafka"]["offset"].is_i64(), "{job}");
        assert!(
            job["verified_at"].as_str() >= job["dispatched_at"].as_str(),
            "verified after it was produced: {job}"
        );
    }
    assert!(metric(&env, "tickler_delivery_verified_total").await >= 20.0);
    env.finish().await;
}

/// The broker acknowledged the record, then lost it: its topic was deleted
/// and made again, and another record now sits at its offset. The job is
/// produced again as attempt 2, once, and counted.
///
/// Long because the loss is staged by hand (the topic deleted, made again
/// and filled) before the verifier is let loose on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_lost_with_its_topic_is_produced_again_as_the_next_attempt() {
    let env = TestEnv::start_with(|c| {
        c.dispatcher.verify = Verify::Off;
        c.kafka.topic_refresh_ms = 1_000;
    })
    .await;
    let brokers = env.config.kafka.brokers.clone();
    let topic = format!("{}-remade", env.topic);
    tickler::kafka::topic_ensure(&brokers, &topic, 1)
        .await
        .unwrap();
    // Known to the API's metadata (refreshed every second here).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let id = env
        .job_create(json!({"payload": "lost", "delay_ms": 0, "topic": topic}))
        .await["id"]
        .as_u64()
        .unwrap();
    let first = job_await(&env, id, Duration::from_secs(20), |job| {
        job["status"] == "dispatched"
    })
    .await;
    let offset = first["kafka"]["offset"].as_i64().unwrap();
    assert_eq!(
        first["verified_at"],
        Value::Null,
        "verification is off here"
    );

    // The topic deleted and made again; records of someone else's fill it
    // past the job's offset.
    topic_delete(&brokers, &topic).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    tickler::kafka::topic_ensure(&brokers, &topic, 1)
        .await
        .unwrap();
    let filler = producer(&brokers, &env.config.kafka.options, 0, 10_000).unwrap();
    for n in 0..=offset {
        filler
            .send(
                FutureRecord::<str, str>::to(&topic).payload(&format!("other {n}")),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
    }
    // The dispatcher's metadata has the topic again before it is needed.
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let stop = sweeping_verifier(&env);
    let again = job_await(&env, id, Duration::from_secs(30), |job| {
        job["attempt"] == 2 && job["status"] == "dispatched"
    })
    .await;
    stop.cancel();
    let error = again["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("offset {offset}")) && error.contains("not tickler's"),
        "{again}"
    );
    assert_eq!(
        again["max_attempts"].as_u64(),
        first["max_attempts"].as_u64().map(|n| n + 1),
        "the lost attempt is not the consumer's"
    );
    // On the topic now: the filler, then the job's second attempt.
    let reader = consumer_from_beginning(&brokers, &topic);
    let records = records_read(&reader, offset as usize + 2, Duration::from_secs(20)).await;
    let ours: Vec<_> = records
        .iter()
        .filter(|r| r.header("tickler-job-id") == Some(&id.to_string()))
        .collect();
    assert_eq!(ours.len(), 1, "{records:?}");
    assert_eq!(ours[0].header("tickler-attempt"), Some("2"));
    let counted = format!("tickler_delivery_missing_total{{topic=\"{topic}\"}}");
    assert_eq!(metric(&env, &counted).await, 1.0, "counted once, by topic");
    // Its history says why.
    let (_, history) = env.get(&format!("/v1/jobs/{id}/history")).await;
    assert!(history.to_string().contains("pending"), "{history}");
    env.finish().await;
}

/// Rows no verifier was handed — dispatched by an instance with
/// verification off, as by a build before it — are verified by another
/// instance's sweep, and verifying keeps `updated_at`. A row whose position
/// was edited by hand into nonsense is counted and left; the others are
/// verified all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_verifies_rows_no_verifier_was_handed_and_a_nonsense_position_costs_its_row() {
    let env = TestEnv::start_with(|c| c.dispatcher.verify = Verify::Off).await;
    let mut ids = Vec::new();
    for n in 0..6 {
        let created = env.job_create(json!({"payload": n, "delay_ms": 0})).await;
        ids.push(created["id"].as_u64().unwrap());
    }
    for id in &ids {
        job_await(&env, *id, Duration::from_secs(20), |job| {
            job["status"] == "dispatched"
        })
        .await;
    }
    let bad = ids[0];
    sqlx::query("UPDATE jobs SET kafka_offset = -7 WHERE id = ?")
        .bind(bad)
        .execute(&env.sql)
        .await
        .unwrap();
    // A partition no broker can have: no record was lost there either.
    let nowhere = ids[1];
    sqlx::query("UPDATE jobs SET kafka_partition = -3 WHERE id = ?")
        .bind(nowhere)
        .execute(&env.sql)
        .await
        .unwrap();
    let updated = |id: u64| {
        let sql = env.sql.clone();
        async move {
            sqlx::query_scalar::<_, chrono::NaiveDateTime>(
                "SELECT updated_at FROM jobs WHERE id = ?",
            )
            .bind(id)
            .fetch_one(&sql)
            .await
            .unwrap()
        }
    };
    let before = updated(ids[2]).await;

    let stop = sweeping_verifier(&env);
    for id in &ids[2..] {
        job_await(&env, *id, Duration::from_secs(30), |job| {
            job["verified_at"].is_string()
        })
        .await;
    }
    // Both nonsense positions are counted as never knowable, at once.
    let counted = format!(
        "tickler_delivery_unknowable_total{{topic=\"{}\"}}",
        env.topic
    );
    let unknowable = eventually(Duration::from_secs(10), || async {
        (metric(&env, &counted).await == 2.0).then_some(())
    })
    .await;
    stop.cancel();
    assert!(unknowable.is_some(), "{}", metric(&env, &counted).await);
    assert_eq!(
        updated(ids[2]).await,
        before,
        "verifying is no change of the job's"
    );
    let left = job(&env, bad).await;
    assert_eq!(left["status"], "dispatched", "{left}");
    assert_eq!(left["attempt"], 1, "never produced again: {left}");
    assert_eq!(left["verified_at"], Value::Null, "{left}");
    let left = job(&env, nowhere).await;
    assert_eq!(
        (left["status"].as_str(), left["attempt"].as_u64()),
        (Some("dispatched"), Some(1)),
        "{left}"
    );
    env.finish().await;
}

/// `verified_at` is informational: a zero date set by hand with a lax
/// `sql_mode` (the one hostile value the column takes) reads as not
/// verified, and the pending job it was set on is still produced and then
/// verified. (The driver reads a zero date as no value; the store's read
/// of the column also takes any value it cannot decode as none.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_at_that_does_not_decode_costs_the_job_nothing() {
    let env = TestEnv::start().await;
    let id = env
        .job_create(json!({"payload": 1, "delay_ms": 3_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    let mut conn = env.sql.acquire().await.unwrap();
    sqlx::query("SET SESSION sql_mode = ''")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("UPDATE jobs SET verified_at = '0000-00-00 00:00:00.000' WHERE id = ?")
        .bind(id)
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let pending = job(&env, id).await;
    assert_eq!(
        (pending["status"].as_str(), &pending["verified_at"]),
        (Some("pending"), &Value::Null),
        "{pending}"
    );
    let verified = job_await(&env, id, Duration::from_secs(20), |job| {
        job["status"] == "dispatched" && job["verified_at"].is_string()
    })
    .await;
    assert_eq!(verified["attempt"], 1, "{verified}");
    env.finish().await;
}

async fn topic_delete(brokers: &str, topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    for result in admin
        .delete_topics(&[topic], &AdminOptions::new())
        .await
        .unwrap()
    {
        result.unwrap();
    }
}
