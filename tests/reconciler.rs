//! Repairs from MySQL: jobs the index lost, claims whose dispatcher died,
//! and a Redis that lost everything. Each test simulates the fault's
//! leftovers exactly (rows and keys as a crash leaves them), then lets the
//! repair run.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use tickler::config::Role;
use tickler::roles::purger::{PurgeReport, Purger, PurgerConfig};
use tickler::roles::reconciler::{Reconciler, ReconcilerConfig};
use tickler::roles::resolver::Resolver;
use tickler::roles::service::Service;
use tickler_testkit::{records_read, TestEnv};
use tokio::sync::Notify;

fn reconciler(env: &TestEnv) -> Reconciler {
    reconciler_with(env, ReconcilerConfig::from_config(&env.config))
}

fn reconciler_with(env: &TestEnv, config: ReconcilerConfig) -> Reconciler {
    Reconciler::new(
        env.store.clone(),
        env.index.clone(),
        config,
        Arc::new(Notify::new()),
        Resolver::new(
            env.store.clone(),
            env.index.clone(),
            &env.config,
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
        ),
    )
}

fn purger(env: &TestEnv) -> Purger {
    Purger::new(env.store.clone(), PurgerConfig::from_config(&env.config))
}

/// A tickler whose own reconciler is off, so the test drives repairs.
async fn env_without_reconciler() -> TestEnv {
    TestEnv::start_with(|c| {
        c.roles = vec![Role::Api, Role::Loader, Role::Dispatcher];
    })
    .await
}

/// Inserts a row the way a tickler that died right after its INSERT (before
/// indexing) leaves it.
async fn row_insert(env: &TestEnv, status: &str, due_offset_ms: i64) -> u64 {
    sqlx::query(
        "INSERT INTO jobs (topic, payload, schedule_time, status, claim_token, claim_expires_at) \
         VALUES (?, 'x', TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)), ?, \
         IF(? = 'dispatching', 1, NULL), \
         IF(? = 'dispatching', TIMESTAMPADD(SECOND, -1, UTC_TIMESTAMP(3)), NULL))",
    )
    .bind(&env.topic)
    .bind(due_offset_ms * 1000)
    .bind(status)
    .bind(status)
    .bind(status)
    .execute(&env.sql)
    .await
    .unwrap()
    .last_insert_id()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciler_refeeds_an_overdue_job_the_index_never_got() {
    let env = env_without_reconciler().await;
    let consumer = env.consumer();
    let id = row_insert(&env, "pending", -5_000).await;
    assert!(!env.redis_holds(id).await);

    let now = env.store.db_now().await.unwrap();
    let report = reconciler(&env).run_once(now).await.unwrap();
    assert_eq!(report.refed, 1, "{report:?}");

    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(records.len(), 1, "the lost job is produced");
    assert_eq!(
        records[0].header("tickler-job-id"),
        Some(id.to_string().as_str())
    );
    // A second pass finds nothing to do.
    let now = env.store.db_now().await.unwrap();
    assert_eq!(reconciler(&env).run_once(now).await.unwrap().refed, 0);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciler_returns_an_expired_claim_to_pending_and_it_is_produced() {
    let env = env_without_reconciler().await;
    let consumer = env.consumer();
    // A dispatcher claimed this in MySQL, then died: lease expired.
    let id = row_insert(&env, "dispatching", -2_000).await;
    // A live claim must be left alone.
    let live = row_insert(&env, "pending", -2_000).await;
    sqlx::query(
        "UPDATE jobs SET status = 'dispatching', claim_token = 2, \
         claim_expires_at = TIMESTAMPADD(MINUTE, 5, UTC_TIMESTAMP(3)) WHERE id = ?",
    )
    .bind(live)
    .execute(&env.sql)
    .await
    .unwrap();

    let now = env.store.db_now().await.unwrap();
    let report = reconciler(&env).run_once(now).await.unwrap();
    assert_eq!(report.rescued, 1, "{report:?}");

    let records = records_read(&consumer, 2, Duration::from_secs(5)).await;
    let ids: Vec<_> = records
        .iter()
        .map(|r| r.header("tickler-job-id").unwrap().to_owned())
        .collect();
    assert_eq!(
        ids,
        vec![id.to_string()],
        "only the expired claim is produced"
    );
    assert_eq!(records[0].header("tickler-attempt"), Some("1"));
    assert_eq!(env.job_status(id).await, "dispatched");
    assert_eq!(env.job_status(live).await, "dispatching");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loader_rebuilds_the_window_after_redis_loses_everything() {
    let env = env_without_reconciler().await;
    let consumer = env.consumer();
    let soon = env
        .job_create(json!({"payload": "soon", "delay_ms": 2_500}))
        .await;
    let soon_id = soon["id"].as_u64().unwrap();
    let mut loader = env.loader();
    let now = env.store.db_now().await.unwrap();
    let first = loader.run_once(now).await.unwrap();
    assert!(!first.rebuilt);

    // What FLUSHALL does to this deployment's keys (other tests share the
    // Redis, so only ours go).
    let client = redis::Client::open(env.config.redis.url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for key in env.redis_keys().await {
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    assert!(!env.redis_holds(soon_id).await);

    let now = env.store.db_now().await.unwrap();
    let report = loader.run_once(now).await.unwrap();
    assert!(report.rebuilt, "the loss is noticed: {report:?}");
    assert!(
        env.redis_holds(soon_id).await,
        "the window is indexed again"
    );
    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(records.len(), 1, "and the job fires");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_past_retention_are_purged_with_their_history() {
    let env = env_without_reconciler().await;
    let mut ids = Vec::new();
    for n in 0..6 {
        let job = env
            .job_create(json!({"payload": n, "delay_ms": 3_600_000}))
            .await;
        ids.push(job["id"].as_u64().unwrap());
    }
    // By hand: five of them in each state, last changed 40 days ago (one
    // recently), and one still pending from long ago.
    let states = [
        ("succeeded", 40, "NULL"),
        ("dead", 40, "NULL"),
        ("cancelled", 40, "NULL"),
        ("dispatched", 40, "NULL"),
        // Waiting for its result: never purged, however old.
        ("dispatched", 40, "UTC_TIMESTAMP(3) + INTERVAL 1 HOUR"),
        ("succeeded", 1, "NULL"),
    ];
    for (id, (status, days, deadline)) in ids.iter().zip(states) {
        sqlx::query(&format!(
            "UPDATE jobs SET status = ?, ack_deadline = {deadline}, \
             updated_at = UTC_TIMESTAMP(3) - INTERVAL {days} DAY WHERE id = ?"
        ))
        .bind(status)
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    }
    let old_pending = env
        .job_create(json!({"payload": "p", "delay_ms": 3_600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    sqlx::query("UPDATE jobs SET updated_at = UTC_TIMESTAMP(3) - INTERVAL 400 DAY WHERE id = ?")
        .bind(old_pending)
        .execute(&env.sql)
        .await
        .unwrap();

    let purged = purger(&env).run_once(Utc::now()).await.unwrap().purged;
    assert_eq!(purged, 4);
    let left: Vec<u64> = sqlx::query_scalar("SELECT id FROM jobs ORDER BY id")
        .fetch_all(&env.sql)
        .await
        .unwrap();
    assert_eq!(left, vec![ids[4], ids[5], old_pending]);
    let orphans: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM job_events e WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = e.job_id)",
    )
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!(orphans, 0, "history goes with its job");
    assert_eq!(
        purger(&env).run_once(Utc::now()).await.unwrap(),
        PurgeReport::default()
    );

    let mut keep_forever = Purger::new(
        env.store.clone(),
        PurgerConfig {
            retention: None,
            ..PurgerConfig::from_config(&env.config)
        },
    );
    sqlx::query("UPDATE jobs SET updated_at = UTC_TIMESTAMP(3) - INTERVAL 400 DAY WHERE id = ?")
        .bind(ids[5])
        .execute(&env.sql)
        .await
        .unwrap();
    assert_eq!(
        keep_forever.run_once(Utc::now()).await.unwrap().purged,
        0,
        "retention_days = 0"
    );
    env.finish().await;
}
