//! Retarget (#60): pending jobs move to another Kafka topic — in bulk
//! (`"action": {"type": "retarget", "topic": …}`) or one at a time
//! (`PATCH /v1/jobs/{id}` with `topic`) — keeping their id, key, payload,
//! time and attempt, and are produced there, never on the old topic. A job
//! whose key a job on the target topic holds stays where it was and is
//! reported as a conflict; jobs no longer pending are left; a preview
//! writes nothing; a target the broker lacks or the caller may not use is
//! refused with nothing written; each move is in the job's history with
//! both topics.

use std::time::Duration;

use serde_json::{json, Value};
use tickler_testkit::{eventually, records_read, TestEnv};

/// A fresh topic on the broker, made before tickler starts (so its
/// pre-flight check knows it from its first look).
async fn topic_new() -> String {
    let topic = tickler_testkit::unique("tickler-test-new-");
    tickler::kafka::topic_ensure(&tickler_testkit::kafka_brokers(), &topic, 2)
        .await
        .expect("kafka is running (scripts/services)");
    topic
}

/// Creates a job an hour ahead on `topic` with key `key`.
async fn job_on(env: &TestEnv, topic: &str, key: &str) -> Value {
    env.job_create(
        json!({"topic": topic, "key": key, "payload": {"key": key}, "delay_ms": 3_600_000}),
    )
    .await
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

/// A job's row as the assertions look at it: topic, key, version, attempt,
/// schedule time (ms), status.
async fn row(env: &TestEnv, id: u64) -> (String, String, u32, u32, i64, String) {
    sqlx::query_as(
        "SELECT CAST(topic AS CHAR), CAST(job_key AS CHAR), version, attempt, \
         CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', schedule_time) / 1000 AS SIGNED), \
         CAST(status AS CHAR) FROM jobs WHERE id = ?",
    )
    .bind(id)
    .fetch_one(&env.sql)
    .await
    .unwrap()
}

async fn count(env: &TestEnv, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(&env.sql).await.unwrap()
}

fn id_of(job: &Value) -> u64 {
    job["id"].as_u64().expect("a job id")
}

fn code(reply: &Value) -> Option<&str> {
    reply["error"]["code"].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retargeted_jobs_are_produced_to_the_new_topic_and_not_the_old_one() {
    let target = topic_new().await;
    let env = TestEnv::start().await;
    let old = env.topic.clone();
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(id_of(&job_on(&env, &old, &format!("k{i}")).await));
    }
    // Produced already: not moved (a dispatched job is never pending again
    // by a retarget).
    let gone = id_of(&job_on(&env, &old, "done").await);
    sqlx::query("UPDATE jobs SET status = 'dispatched' WHERE id = ?")
        .bind(gone)
        .execute(&env.sql)
        .await
        .unwrap();
    let before = row(&env, ids[0]).await;

    let (status, started) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"topic": old}, "action": {"type": "retarget", "topic": target}, "dry_run": false}),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let op = finished(&env, started["id"].as_u64().unwrap()).await;
    assert_eq!(op["status"], "done", "{op}");
    assert_eq!(
        (
            op["changed"].as_u64(),
            op["skipped"].as_u64(),
            op["conflicts"].as_u64()
        ),
        (Some(3), Some(1), Some(0)),
        "{op}"
    );
    let after = row(&env, ids[0]).await;
    assert_eq!(after.0, target, "on the new topic");
    assert_eq!(
        (&after.1, after.2, after.3, after.4, &after.5),
        (&before.1, before.2 + 1, before.3, before.4, &before.5),
        "key, attempt, time and status kept; version moved on"
    );
    assert_eq!(row(&env, gone).await.0, old, "a dispatched job stays");

    // The history names both topics and the operation.
    let (_, history) = env.get(&format!("/v1/jobs/{}/history", ids[1])).await;
    let last = history["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["actor"], format!("bulk:{}", op["id"]), "{history}");
    assert_eq!(
        (last["topic_from"].as_str(), last["topic_to"].as_str()),
        (Some(old.as_str()), Some(target.as_str())),
        "{history}"
    );
    assert_eq!(last["status"], "pending");
    let first = &history["events"][0];
    assert!(first.get("topic_from").is_none(), "{history}");

    // Due now: produced, to the new topic.
    let (status, moved) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"ids": ids}, "action": {"type": "move", "run_at": chrono::Utc::now().to_rfc3339()}, "dry_run": false}),
        )
        .await;
    assert_eq!(status, 202, "{moved}");
    finished(&env, moved["id"].as_u64().unwrap()).await;
    for id in &ids {
        env.status_await(*id, "dispatched", Duration::from_secs(30))
            .await;
    }
    let consumer = tickler_testkit::consumer_from_beginning(&env.config.kafka.brokers, &target);
    let records = records_read(&consumer, 3, Duration::from_secs(30)).await;
    let mut produced: Vec<u64> = records
        .iter()
        .map(|r| r.header("tickler-job-id").unwrap().parse().unwrap())
        .collect();
    produced.sort_unstable();
    assert_eq!(produced, ids, "every retargeted job, on the new topic");
    assert_eq!(
        records[0].payload,
        serde_json::to_vec(&json!({"key": records[0].key.clone().unwrap()})).unwrap(),
        "its payload kept"
    );
    // All three are dispatched, so anything on the old topic is there now.
    let old_records = records_read(&env.consumer(), 1, Duration::from_secs(2)).await;
    assert!(
        old_records.is_empty(),
        "nothing on the old topic: {old_records:?}"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_taken_on_the_target_topic_stays_where_it_was_and_is_reported() {
    let target = topic_new().await;
    let env = TestEnv::start().await;
    let old = env.topic.clone();
    let mut ids = Vec::new();
    for key in ["a", "b", "c"] {
        ids.push(id_of(&job_on(&env, &old, key).await));
    }
    // Held on the target: by a job long produced, as by a pending one.
    let holder = id_of(&job_on(&env, &target, "b").await);
    sqlx::query("UPDATE jobs SET status = 'succeeded' WHERE id = ?")
        .bind(holder)
        .execute(&env.sql)
        .await
        .unwrap();
    let before = row(&env, ids[1]).await;

    // The preview says so, and writes nothing.
    let request = |dry_run: bool| json!({"filter": {"topic": old}, "action": {"type": "retarget", "topic": target}, "dry_run": dry_run});
    let (status, preview) = env.post("/v1/jobs/bulk", request(true)).await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        (
            preview["matched"].as_u64(),
            preview["eligible"].as_u64(),
            preview["conflicts"].as_u64()
        ),
        (Some(3), Some(3), Some(1)),
        "{preview}"
    );
    assert_eq!(count(&env, "SELECT COUNT(*) FROM bulk_ops").await, 0);
    assert_eq!(row(&env, ids[0]).await.0, old, "a preview moves nothing");
    assert_eq!(
        count(
            &env,
            "SELECT COUNT(*) FROM job_events WHERE topic_to IS NOT NULL"
        )
        .await,
        0
    );

    let (status, started) = env.post("/v1/jobs/bulk", request(false)).await;
    assert_eq!(status, 202, "{started}");
    let op = finished(&env, started["id"].as_u64().unwrap()).await;
    assert_eq!(op["status"], "done", "{op}");
    assert_eq!(
        (
            op["changed"].as_u64(),
            op["skipped"].as_u64(),
            op["conflicts"].as_u64()
        ),
        (Some(2), Some(0), Some(1)),
        "{op}"
    );
    assert!(op["errors"].as_array().unwrap().is_empty(), "{op}");
    assert_eq!(row(&env, ids[0]).await.0, target);
    assert_eq!(row(&env, ids[2]).await.0, target);
    assert_eq!(
        row(&env, ids[1]).await,
        before,
        "the conflicting job is untouched"
    );
    assert_eq!(
        count(
            &env,
            "SELECT COUNT(*) FROM job_events WHERE topic_to IS NOT NULL"
        )
        .await,
        2,
        "a history row for each job moved, none for the one left"
    );
    // Never two jobs with one (topic, key).
    assert_eq!(
        count(
            &env,
            "SELECT COUNT(*) FROM (SELECT topic, job_key FROM jobs WHERE job_key IS NOT NULL \
             GROUP BY topic, job_key HAVING COUNT(*) > 1) doubled"
        )
        .await,
        0
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retarget_beyond_the_callers_topics_is_refused_and_writes_nothing() {
    let target = topic_new().await;
    let env = TestEnv::start().await;
    let old = env.topic.clone();
    let job = job_on(&env, &old, "x").await;
    let id = id_of(&job);
    let before = row(&env, id).await;
    let writer = tickler_testkit::token_create(
        &env.config.mysql.url,
        "old-topic-writer",
        &[&old],
        &["write", "read"],
    )
    .await;
    let http = tickler_testkit::http_with_token(&writer);
    let send = |method: &'static str, path: String, body: Value| {
        let http = http.clone();
        let env = &env;
        async move {
            env.request_with(&http, method, &path, Some(body.to_string()))
                .await
        }
    };
    for dry_run in [true, false] {
        let (status, reply) = send(
            "POST",
            "/v1/jobs/bulk".to_owned(),
            json!({"filter": {"topic": old}, "action": {"type": "retarget", "topic": target}, "dry_run": dry_run}),
        )
        .await;
        assert_eq!(
            (status, code(&reply)),
            (403, Some("forbidden_topic")),
            "{reply}"
        );
    }
    let (status, reply) = send(
        "PATCH",
        format!("/v1/jobs/{id}"),
        json!({"version": job["version"], "topic": target}),
    )
    .await;
    assert_eq!(
        (status, code(&reply)),
        (403, Some("forbidden_topic")),
        "{reply}"
    );
    // Nor may a token for the target take jobs from a topic it lacks.
    let other = tickler_testkit::token_create(
        &env.config.mysql.url,
        "new-topic-writer",
        &[&target],
        &["write", "read"],
    )
    .await;
    let (status, reply) = env
        .request_with(
            &tickler_testkit::http_with_token(&other),
            "POST",
            "/v1/jobs/bulk",
            Some(
                json!({"filter": {"topic": old}, "action": {"type": "retarget", "topic": target}, "dry_run": false})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(
        (status, code(&reply)),
        (403, Some("forbidden_topic")),
        "{reply}"
    );
    assert_eq!(count(&env, "SELECT COUNT(*) FROM bulk_ops").await, 0);
    assert_eq!(row(&env, id).await, before);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_target_topic_is_refused_and_writes_nothing() {
    let env = TestEnv::start().await;
    let old = env.topic.clone();
    let job = job_on(&env, &old, "x").await;
    let id = id_of(&job);
    let before = row(&env, id).await;
    let missing = tickler_testkit::unique("tickler-missing-");
    for dry_run in [true, false] {
        let (status, reply) = env
            .post(
                "/v1/jobs/bulk",
                json!({"filter": {"topic": old}, "action": {"type": "retarget", "topic": missing}, "dry_run": dry_run}),
            )
            .await;
        assert_eq!(
            (status, code(&reply)),
            (400, Some("unknown_topic")),
            "{reply}"
        );
    }
    let (status, reply) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{id}"),
            Some(json!({"version": job["version"], "topic": missing}).to_string()),
        )
        .await;
    assert_eq!(
        (status, code(&reply)),
        (400, Some("unknown_topic")),
        "{reply}"
    );
    // Not a topic name at all, or the jobs' own topic: the caller's mistakes.
    let (status, reply) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"topic": old}, "action": {"type": "retarget", "topic": "no such/topic"}, "dry_run": true}),
        )
        .await;
    assert_eq!(
        (status, code(&reply)),
        (400, Some("invalid_topic")),
        "{reply}"
    );
    let (status, reply) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"topic": old}, "action": {"type": "retarget", "topic": old}, "dry_run": true}),
        )
        .await;
    assert_eq!(
        (status, code(&reply)),
        (400, Some("invalid_request")),
        "{reply}"
    );
    assert_eq!(count(&env, "SELECT COUNT(*) FROM bulk_ops").await, 0);
    assert_eq!(row(&env, id).await, before);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_with_a_topic_moves_one_job_or_answers_why_not() {
    let target = topic_new().await;
    let env = TestEnv::start().await;
    let old = env.topic.clone();
    let patch = |id: u64, body: Value| {
        let env = &env;
        async move {
            env.request("PATCH", &format!("/v1/jobs/{id}"), Some(body.to_string()))
                .await
        }
    };

    // Moved: the same job, on the new topic, its version moved on.
    let job = job_on(&env, &old, "one").await;
    let id = id_of(&job);
    let (status, moved) = patch(id, json!({"version": job["version"], "topic": target})).await;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(
        (
            moved["id"].as_u64(),
            moved["topic"].as_str(),
            moved["key"].as_str(),
            moved["run_at"].as_str(),
            moved["attempt"].as_u64(),
            moved["status"].as_str()
        ),
        (
            Some(id),
            Some(target.as_str()),
            Some("one"),
            job["run_at"].as_str(),
            Some(1),
            Some("pending")
        ),
        "{moved}"
    );
    assert_eq!(
        moved["version"].as_u64(),
        Some(job["version"].as_u64().unwrap() + 1)
    );
    let (_, history) = env.get(&format!("/v1/jobs/{id}/history")).await;
    let last = history["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (
            last["actor"].as_str(),
            last["topic_from"].as_str(),
            last["topic_to"].as_str()
        ),
        (
            Some("api:test-admin"),
            Some(old.as_str()),
            Some(target.as_str())
        ),
        "{history}"
    );
    // The version read is stale now.
    let (status, reply) = patch(id, json!({"version": job["version"], "topic": old})).await;
    assert_eq!(
        (status, code(&reply)),
        (409, Some("version_conflict")),
        "{reply}"
    );

    // A job on the target holds the key: 409, nothing changed.
    let holder = id_of(&job_on(&env, &target, "two").await);
    let job = job_on(&env, &old, "two").await;
    let before = row(&env, id_of(&job)).await;
    let (status, reply) = patch(
        id_of(&job),
        json!({"version": job["version"], "topic": target, "delay_ms": 60_000}),
    )
    .await;
    assert_eq!(
        (status, code(&reply)),
        (409, Some("key_conflict")),
        "{reply}"
    );
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&holder.to_string()),
        "names the holder: {reply}"
    );
    assert_eq!(row(&env, id_of(&job)).await, before, "nothing changed");

    // No longer pending: too late.
    let job = job_on(&env, &old, "three").await;
    sqlx::query("UPDATE jobs SET status = 'dispatched' WHERE id = ?")
        .bind(id_of(&job))
        .execute(&env.sql)
        .await
        .unwrap();
    let (status, reply) = patch(
        id_of(&job),
        json!({"version": job["version"], "topic": target}),
    )
    .await;
    assert_eq!(
        (status, code(&reply)),
        (409, Some("not_pending")),
        "{reply}"
    );
    assert_eq!(row(&env, id_of(&job)).await.0, old);
    env.finish().await;
}
