//! Bulk changes: a preview changes nothing; an operation changes exactly
//! the matching jobs still in the action's status, in batches, recorded in
//! their history as `bulk:<id>`; jobs that moved on meanwhile are skipped;
//! an operation whose instance died is resumed from its cursor by another,
//! neither skipping nor repeating a job.

use std::time::Duration;

use serde_json::{json, Value};
use tickler::roles::service::Service;
use tickler::store::{BulkAction, BulkFilter};
use tickler_testkit::{eventually, TestEnv};

/// Creates `n` jobs an hour ahead on `topic` with keys `{prefix}{i}`.
async fn seed(env: &TestEnv, topic: &str, prefix: &str, n: usize) -> Vec<u64> {
    let mut ids = Vec::new();
    for i in 0..n {
        let job = env
            .job_create(
                json!({"topic": topic, "key": format!("{prefix}{i}"), "delay_ms": 3_600_000}),
            )
            .await;
        ids.push(job["id"].as_u64().unwrap());
    }
    ids
}

async fn finished(env: &TestEnv, id: u64) -> Value {
    eventually(Duration::from_secs(30), || async {
        let (status, op) = env.get(&format!("/v1/bulk/{id}")).await;
        assert_eq!(status, 200, "{op}");
        (op["status"] != "running").then_some(op)
    })
    .await
    .unwrap_or_else(|| panic!("bulk operation {id} did not finish within 30 s"))
}

async fn schedule_ms(env: &TestEnv, id: u64) -> i64 {
    sqlx::query_scalar(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', schedule_time) / 1000 AS SIGNED) \
         FROM jobs WHERE id = ?",
    )
    .bind(id)
    .fetch_one(&env.sql)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_counts_and_samples_and_changes_nothing() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let ids = seed(&env, &topic, "order-", 30).await;
    seed(&env, &topic, "invoice-", 5).await;
    let before: Vec<i64> =
        futures::future::join_all(ids.iter().map(|id| schedule_ms(&env, *id))).await;

    let (status, preview) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"topic": topic, "key_prefix": "order-"}, "action": {"type": "shift", "by_ms": 60_000}, "dry_run": true}),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["matched"], 30);
    assert_eq!(preview["eligible"], 30);
    assert_eq!(preview["applies_to"], "pending");
    assert_eq!(preview["sample"].as_array().unwrap().len(), 20);
    assert_eq!(preview["sample"][0]["id"].as_u64(), Some(ids[0]));
    let after: Vec<i64> =
        futures::future::join_all(ids.iter().map(|id| schedule_ms(&env, *id))).await;
    assert_eq!(before, after, "a preview moves nothing");
    let ops: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM bulk_ops")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(ops, 0, "a preview records no operation");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shift_moves_every_match_once_and_the_history_names_the_operation() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    // More than one batch of 500.
    let n = 1_100;
    let rows: Vec<Value> = (0..n)
        .map(|i| json!({"topic": topic, "key": format!("k{i}"), "delay_ms": 3_600_000}))
        .collect();
    let mut ids = Vec::new();
    for chunk in rows.chunks(500) {
        let (status, created) = env.post("/v1/jobs/batch", json!({"jobs": chunk})).await;
        assert_eq!(status, 200, "{created}");
        for item in created["results"].as_array().unwrap() {
            ids.push(item["id"].as_u64().unwrap());
        }
    }
    let other = seed(&env, &topic, "other-", 1).await[0];
    let first_before = schedule_ms(&env, ids[0]).await;
    let last_before = schedule_ms(&env, ids[n - 1]).await;
    let other_before = schedule_ms(&env, other).await;

    let (status, started) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"topic": topic, "key_prefix": "k"}, "action": {"type": "shift", "by_ms": -600_000}, "dry_run": false}),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(started["total"], n);
    let op = finished(&env, started["id"].as_u64().unwrap()).await;
    assert_eq!(op["status"], "done", "{op}");
    assert_eq!(op["done"], n);
    assert_eq!(op["changed"], n);
    assert_eq!(op["skipped"], 0);
    assert_eq!(schedule_ms(&env, ids[0]).await, first_before - 600_000);
    assert_eq!(schedule_ms(&env, ids[n - 1]).await, last_before - 600_000);
    assert_eq!(
        schedule_ms(&env, other).await,
        other_before,
        "outside the filter"
    );

    let (_, history) = env.get(&format!("/v1/jobs/{}/history", ids[7])).await;
    let last = history["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["actor"], format!("bulk:{}", op["id"]));
    assert_eq!(last["status"], "pending");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_that_moved_on_are_skipped_never_forced() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let ids = seed(&env, &topic, "c", 10).await;
    // Two were produced and one was cancelled by someone else meanwhile.
    sqlx::query("UPDATE jobs SET status = 'dispatched' WHERE id IN (?, ?)")
        .bind(ids[2])
        .bind(ids[5])
        .execute(&env.sql)
        .await
        .unwrap();
    sqlx::query("UPDATE jobs SET status = 'cancelled' WHERE id = ?")
        .bind(ids[9])
        .execute(&env.sql)
        .await
        .unwrap();

    let (status, started) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"topic": topic}, "action": {"type": "cancel"}, "dry_run": false}),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let op = finished(&env, started["id"].as_u64().unwrap()).await;
    assert_eq!(
        (op["changed"].as_u64(), op["skipped"].as_u64()),
        (Some(7), Some(3)),
        "{op}"
    );
    assert_eq!(env.job_status(ids[2]).await, "dispatched");
    assert_eq!(env.job_status(ids[0]).await, "cancelled");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_redrive_sends_dead_jobs_again() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let ids = seed(&env, &topic, "d", 4).await;
    sqlx::query("UPDATE jobs SET status = 'dead', last_error = 'failed' WHERE id <> ?")
        .bind(ids[3])
        .execute(&env.sql)
        .await
        .unwrap();
    let (status, started) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"topic": topic, "status": "dead"}, "action": {"type": "redrive", "max_attempts": 2}, "dry_run": false}),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let op = finished(&env, started["id"].as_u64().unwrap()).await;
    assert_eq!(op["changed"], 3, "{op}");
    for id in &ids[..3] {
        env.status_await(*id, "dispatched", Duration::from_secs(20))
            .await;
    }
    let attempts: Vec<(u32, u32)> =
        sqlx::query_as("SELECT attempt, max_attempts FROM jobs WHERE id = ?")
            .bind(ids[0])
            .fetch_all(&env.sql)
            .await
            .unwrap();
    assert_eq!(
        attempts,
        vec![(2, 3)],
        "attempt goes on counting, two more allowed"
    );
    assert_eq!(
        env.job_status(ids[3]).await,
        "pending",
        "not dead: untouched"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_whose_instance_died_is_resumed_from_its_cursor() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let ids = seed(&env, &topic, "r", 12).await;
    let before: Vec<i64> =
        futures::future::join_all(ids.iter().map(|id| schedule_ms(&env, *id))).await;
    // An instance started a shift and died after its batch covering the
    // first five jobs committed: those are shifted, the cursor is past
    // them, and the row has not moved since.
    let filter = BulkFilter {
        topic: Some(topic.clone()),
        ..BulkFilter::default()
    };
    let action = BulkAction::Shift { by_ms: 1_000 };
    let max_id = *ids.last().unwrap();
    let op_id = env
        .store
        .bulk_create("api:test", &filter, &action, max_id, 12, 42)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET schedule_time = TIMESTAMPADD(MICROSECOND, 1000000, schedule_time) \
         WHERE id <= ?",
    )
    .bind(ids[4])
    .execute(&env.sql)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE bulk_ops SET cursor_id = ?, done = 5, changed = 5, \
         updated_at = TIMESTAMPADD(SECOND, -60, UTC_TIMESTAMP(3)) WHERE id = ?",
    )
    .bind(ids[4])
    .bind(op_id)
    .execute(&env.sql)
    .await
    .unwrap();

    let op = finished(&env, op_id).await;
    assert_eq!(op["status"], "done", "{op}");
    assert_eq!(
        (op["done"].as_u64(), op["changed"].as_u64()),
        (Some(12), Some(12))
    );
    for (id, was) in ids.iter().zip(&before) {
        assert_eq!(
            schedule_ms(&env, *id).await,
            was + 1_000,
            "job {id} shifted exactly once"
        );
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bulk_requests_get_a_stable_code_and_start_nothing() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    seed(&env, &topic, "b", 2).await;
    let cases = [
        (
            json!({"filter": {"topic": topic}, "action": {"type": "cancel"}}),
            400,
            "invalid_request",
        ),
        (
            json!({"filter": {}, "action": {"type": "cancel"}, "dry_run": true}),
            400,
            "invalid_request",
        ),
        (
            json!({"filter": {"topic": topic}, "dry_run": true}),
            400,
            "invalid_request",
        ),
        (
            json!({"filter": {"topic": topic}, "action": {"type": "explode"}, "dry_run": true}),
            400,
            "invalid_request",
        ),
        (
            json!({"filter": {"topic": topic}, "action": {"type": "cancel", "by_ms": 5}, "dry_run": true}),
            400,
            "invalid_request",
        ),
        (
            json!({"filter": {"topic": topic}, "action": {"type": "shift", "by_ms": 0}, "dry_run": true}),
            400,
            "invalid_schedule",
        ),
        (
            json!({"filter": {"topic": topic}, "action": {"type": "move", "run_at": "soon"}, "dry_run": true}),
            400,
            "invalid_request",
        ),
        (
            json!({"filter": {"topic": topic}, "action": {"type": "policy"}, "dry_run": true}),
            400,
            "invalid_policy",
        ),
        (
            json!({"filter": {"topic": topic}, "action": {"type": "policy", "max_attempts": 0}, "dry_run": true}),
            400,
            "invalid_policy",
        ),
        (
            json!({"filter": {"status": "sleeping"}, "action": {"type": "cancel"}, "dry_run": true}),
            400,
            "invalid_request",
        ),
        (
            json!({"filter": {"ids": []}, "action": {"type": "cancel"}, "dry_run": true}),
            400,
            "invalid_request",
        ),
        (
            json!({"filter": {"run_at_from": "yesterday"}, "action": {"type": "cancel"}, "dry_run": true}),
            400,
            "invalid_request",
        ),
        (
            json!({"filter": {"topic": topic, "owner": "me"}, "action": {"type": "cancel"}, "dry_run": true}),
            400,
            "invalid_request",
        ),
    ];
    for (body, status, code) in cases {
        let (got, reply) = env.post("/v1/jobs/bulk", body.clone()).await;
        assert_eq!(
            (got, reply["error"]["code"].as_str()),
            (status, Some(code)),
            "{body} → {reply}"
        );
    }
    // Redrive needs the admin scope; a writer may cancel, on its own topics.
    let writer = tickler_testkit::token_create(
        &env.config.mysql.url,
        "bulk-writer",
        &[&topic],
        &["write", "read"],
    )
    .await;
    let http = tickler_testkit::http_with_token(&writer);
    let send =
        |body: Value| env.request_with(&http, "POST", "/v1/jobs/bulk", Some(body.to_string()));
    let (got, reply) =
        send(json!({"filter": {"topic": topic}, "action": {"type": "redrive"}, "dry_run": true}))
            .await;
    assert_eq!(
        (got, reply["error"]["code"].as_str()),
        (403, Some("forbidden_scope"))
    );
    let (got, reply) = send(
        json!({"filter": {"topic": "someone.else"}, "action": {"type": "cancel"}, "dry_run": true}),
    )
    .await;
    assert_eq!(
        (got, reply["error"]["code"].as_str()),
        (403, Some("forbidden_topic"))
    );
    // Without a topic, the writer's operation still covers only its topics.
    sqlx::query("UPDATE jobs SET topic = 'someone.else' WHERE job_key = 'b0'")
        .execute(&env.sql)
        .await
        .unwrap();
    let (got, preview) =
        send(json!({"filter": {"key_prefix": "b"}, "action": {"type": "cancel"}, "dry_run": true}))
            .await;
    assert_eq!(
        (got, preview["matched"].as_u64()),
        (200, Some(1)),
        "{preview}"
    );
    // Nor does it see the operations of tokens for other topics.
    let (status, admin_op) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"key_prefix": "zz"}, "action": {"type": "cancel"}, "dry_run": false}),
        )
        .await;
    assert_eq!(status, 202, "{admin_op}");
    let admin_op = admin_op["id"].as_u64().unwrap();
    let (got, _) = env
        .request_with(&http, "GET", &format!("/v1/bulk/{admin_op}"), None)
        .await;
    assert_eq!(got, 404, "another token's operation");
    let (got, list) = env.request_with(&http, "GET", "/v1/bulk", None).await;
    assert_eq!(
        (got, list["operations"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{list}"
    );
    let (got, _) = env.get(&format!("/v1/bulk/{admin_op}")).await;
    assert_eq!(got, 200, "a token for every topic sees every operation");

    let (got, reply) = env.get("/v1/bulk/999999").await;
    assert_eq!(
        (got, reply["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (got, reply) = env.get("/v1/bulk/abc").await;
    assert_eq!(
        (got, reply["error"]["code"].as_str()),
        (400, Some("invalid_id"))
    );
    let ops: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM bulk_ops")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(ops, 1, "only the admin's operation");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_applied_again_after_its_commit_changes_nothing() {
    // The connection broke while the commit's answer was on its way: the
    // runner tries the batch again with the cursor it had. The cursor's
    // compare-and-set refuses it; the jobs moved once.
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let ids = seed(&env, &topic, "a", 3).await;
    let before = schedule_ms(&env, ids[0]).await;
    let filter = BulkFilter {
        topic: Some(topic.clone()),
        ..BulkFilter::default()
    };
    let op_id = env
        .store
        .bulk_create(
            "api:test",
            &filter,
            &BulkAction::Shift { by_ms: 1_000 },
            ids[2],
            3,
            7,
        )
        .await
        .unwrap();
    let op = env.store.bulk_get(op_id).await.unwrap().unwrap();
    let batch = env.store.bulk_next(&op, 500).await.unwrap();
    assert_eq!(batch.len(), 3);
    let first = env
        .store
        .bulk_apply(&op, &batch, |_| 1, |_| true)
        .await
        .unwrap();
    assert_eq!(first.map(|b| b.changed.len()), Some(3));
    let again = env
        .store
        .bulk_apply(&op, &batch, |_| 1, |_| true)
        .await
        .unwrap();
    assert!(again.is_none(), "the stale cursor is refused");
    assert_eq!(
        schedule_ms(&env, ids[0]).await,
        before + 1_000,
        "moved once"
    );
    let row = env.store.bulk_get(op_id).await.unwrap().unwrap();
    assert_eq!((row.done, row.changed, row.cursor_id), (3, 3, ids[2]));

    // An operation stopped by hand (schema.md) writes nothing more.
    let stopped = env
        .store
        .bulk_create(
            "api:test",
            &filter,
            &BulkAction::Shift { by_ms: 1_000 },
            ids[2],
            3,
            8,
        )
        .await
        .unwrap();
    sqlx::query("UPDATE bulk_ops SET status = 'failed' WHERE id = ?")
        .bind(stopped)
        .execute(&env.sql)
        .await
        .unwrap();
    let stopped = env.store.bulk_get(stopped).await.unwrap().unwrap();
    let batch = env.store.bulk_next(&stopped, 500).await.unwrap();
    assert!(env
        .store
        .bulk_apply(&stopped, &batch, |_| 1, |_| true)
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        schedule_ms(&env, ids[0]).await,
        before + 1_000,
        "still moved once"
    );
    env.finish().await;
}

/// The runner's `run_once`, driven directly with no tickler running: it
/// takes over the one stalled operation, works it through, and then finds
/// nothing more to take over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_takes_over_a_stalled_operation_in_one_pass() {
    use std::sync::Arc;
    let mut env = TestEnv::start().await;
    let topic = env.topic.clone();
    let ids = seed(&env, &topic, "s", 3).await;
    env.stop().await;
    let store =
        tickler::store::Store::connect_lazy(&env.config.mysql.url, 2, tickler::store::Actor::Api)
            .unwrap();
    let filter = BulkFilter {
        topic: Some(topic.clone()),
        ..BulkFilter::default()
    };
    let op_id = store
        .bulk_create(
            "api:test",
            &filter,
            &BulkAction::Cancel {},
            *ids.last().unwrap(),
            3,
            7,
        )
        .await
        .unwrap();
    sqlx::query(
        "UPDATE bulk_ops SET updated_at = TIMESTAMPADD(SECOND, -60, UTC_TIMESTAMP(3)) WHERE id = ?",
    )
    .bind(op_id)
    .execute(&env.sql)
    .await
    .unwrap();
    let tracker = tokio_util::task::TaskTracker::new();
    let mut runner = tickler::roles::bulk::BulkRunner::new(
        store.clone(),
        env.index.clone(),
        &env.config,
        tickler::roles::topic_controls::TopicControls::new(store.clone(), &env.config),
        Arc::new(tokio::sync::Notify::new()),
        tracker.clone(),
        tokio_util::sync::CancellationToken::new(),
    );
    let report = runner.run_once(chrono::Utc::now()).await.unwrap();
    assert_eq!(report.adopted, Some(op_id));
    let done = eventually(Duration::from_secs(20), || async {
        let op = store.bulk_get(op_id).await.unwrap().unwrap();
        (op.status == tickler::store::BulkStatus::Done).then_some(op)
    })
    .await
    .expect("the adopted operation finishes");
    assert_eq!((done.done, done.changed), (3, 3));
    for id in &ids {
        assert_eq!(env.job_status(*id).await, "cancelled");
    }
    assert_eq!(
        runner.run_once(chrono::Utc::now()).await.unwrap().adopted,
        None,
        "nothing else stalled"
    );
    tracker.close();
    tracker.wait().await;
    env.finish().await;
}
