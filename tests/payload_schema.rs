//! Payload schemas against the real services: a topic's `payload_schema`
//! refuses creates whose payload does not match (400 with the failing path,
//! nothing written); a job that no longer matches when it falls due (the
//! schema changed while it was pending) is held — pending, not produced,
//! listed by `held=true` — until released (checked again, or forced), or
//! its payload is fixed. A schema edited by hand into nonsense costs only
//! its topic. Topics without a schema are unaffected.

use std::time::Duration;

use serde_json::{json, Value};
use tickler_testkit::{consumer_from_beginning, eventually, records_read, unique, TestEnv};

const ORDER_SCHEMA: &str = r#"{"type": "object", "required": ["amount"],
    "properties": {"amount": {"type": "number"}}}"#;

/// A tickler that does not refuse a topic created after it read the
/// broker's metadata (the second topic of each test).
async fn env_start() -> TestEnv {
    TestEnv::start_with(|c| c.kafka.topic_check = tickler::config::TopicCheck::Off).await
}

async fn topic_new(env: &TestEnv) -> String {
    let topic = unique("tickler-test-");
    tickler::kafka::topic_ensure_with(
        &env.config.kafka.brokers,
        &env.config.kafka.options,
        &topic,
        2,
    )
    .await
    .expect("topic created");
    topic
}

async fn schema_set(env: &TestEnv, topic: &str, schema: Value) -> (u16, Value) {
    env.request(
        "PATCH",
        &format!("/v1/topics/{topic}"),
        Some(json!({ "payload_schema": schema }).to_string()),
    )
    .await
}

fn order_schema() -> Value {
    serde_json::from_str(ORDER_SCHEMA).unwrap()
}

async fn job(env: &TestEnv, id: u64) -> Value {
    let (status, job) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(status, 200, "{job}");
    job
}

async fn is_held(env: &TestEnv, id: u64) -> bool {
    job(env, id).await["held_at"].is_string()
}

async fn bulk_ops_count(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM bulk_ops")
        .fetch_one(&env.sql)
        .await
        .unwrap()
}

/// Bulk operation `id` once done.
async fn bulk_done(env: &TestEnv, id: u64) -> Value {
    eventually(Duration::from_secs(20), || async {
        let (_, op) = env.get(&format!("/v1/bulk/{id}")).await;
        (op["status"] == "done").then_some(op)
    })
    .await
    .unwrap_or_else(|| panic!("bulk operation {id} did not finish"))
}

async fn held_await(env: &TestEnv, id: u64) -> Value {
    eventually(Duration::from_secs(15), || async {
        let job = job(env, id).await;
        job["held_at"].is_string().then_some(job)
    })
    .await
    .unwrap_or_else(|| panic!("job {id} not held"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_that_do_not_match_the_topics_schema_are_refused_with_the_failing_path() {
    let env = env_start().await;
    let topic = env.topic.clone();
    let other = topic_new(&env).await;

    // A schema that does not compile is refused, and nothing is stored.
    let (status, answer) = schema_set(&env, &topic, json!({"type": "numbr"})).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_schema")),
        "{answer}"
    );
    let (status, answer) = schema_set(
        &env,
        &topic,
        json!({"$ref": "https://example.com/order.json"}),
    )
    .await;
    assert_eq!(status, 400, "a remote $ref is never fetched: {answer}");
    let (status, view) = schema_set(&env, &topic, order_schema()).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["payload_schema"], order_schema());
    let (_, listed) = env.get("/v1/topics").await;
    assert_eq!(
        listed["topics"][0]["payload_schema"],
        order_schema(),
        "{listed}"
    );

    let (status, answer) = env
        .post(
            "/v1/jobs",
            json!({"topic": topic, "delay_ms": 0, "payload": {"amount": "x"}}),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("payload_schema")),
        "{answer}"
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"/amount: "x" is not of type "number""#),
        "{message}"
    );
    // Bytes that are not JSON, and a missing payload, are refused too.
    let (status, answer) = env
        .post(
            "/v1/jobs",
            json!({"topic": topic, "delay_ms": 0, "payload_base64": "//79"}),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("payload_schema")),
        "{answer}"
    );
    let (status, answer) = env
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [
                {"topic": topic, "delay_ms": 0, "payload": {}},
                {"topic": other, "delay_ms": 0, "payload": {"anything": true}},
            ]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["results"][0]["error"]["code"], "payload_schema");
    assert_eq!(
        answer["results"][1]["result"], "created",
        "a topic without a schema is unaffected"
    );
    assert_eq!(env.jobs_count().await, 1, "nothing written for the refused");

    // A matching create (JSON, and bytes that are matching JSON) is produced.
    let good = env
        .job_create(json!({"topic": topic, "delay_ms": 0, "payload": {"amount": 12.5}}))
        .await;
    let bytes = env
        .job_create(json!({"topic": topic, "delay_ms": 0, "payload_base64": "eyJhbW91bnQiOjF9"}))
        .await;
    for id in [&good["id"], &bytes["id"]] {
        env.status_await(id.as_u64().unwrap(), "dispatched", Duration::from_secs(15))
            .await;
    }
    // Removed: anything goes again.
    let (status, view) = schema_set(&env, &topic, Value::Null).await;
    assert_eq!((status, view["payload_schema"].clone()), (200, Value::Null));
    let free = env
        .job_create(json!({"topic": topic, "delay_ms": 0, "payload": "free"}))
        .await;
    assert!(free["id"].is_u64(), "{free}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_no_longer_matches_when_due_is_held_until_released() {
    let env = env_start().await;
    let topic = env.topic.clone();
    let consumer = consumer_from_beginning(&env.config.kafka.brokers, &topic);
    // Created while the schema allows them; due in 3 s.
    let (status, _) = schema_set(&env, &topic, json!({"type": "object"})).await;
    assert_eq!(status, 200);
    let held = env
        .job_create(json!({"topic": topic, "delay_ms": 3000, "payload": {"amount": "x"}}))
        .await["id"]
        .as_u64()
        .unwrap();
    let fixed = env
        .job_create(json!({"topic": topic, "delay_ms": 3000, "payload": {"amount": "y"}}))
        .await["id"]
        .as_u64()
        .unwrap();
    let fine = env
        .job_create(json!({"topic": topic, "delay_ms": 3000, "payload": {"amount": 3}}))
        .await["id"]
        .as_u64()
        .unwrap();
    // The schema changes while they are pending.
    let (status, _) = schema_set(&env, &topic, order_schema()).await;
    assert_eq!(status, 200);

    env.status_await(fine, "dispatched", Duration::from_secs(15))
        .await;
    for id in [held, fixed] {
        let job = held_await(&env, id).await;
        assert_eq!(job["status"], "pending", "{job}");
        let reason = job["held_reason"].as_str().unwrap();
        assert!(
            reason.contains("/amount") && reason.contains("type"),
            "{reason}"
        );
        assert!(
            !reason.contains("\"x\""),
            "no payload in the reason: {reason}"
        );
    }
    // Not produced: only the matching job reached the topic.
    let records = records_read(&consumer, 2, Duration::from_secs(3)).await;
    let ids: Vec<&str> = records
        .iter()
        .filter_map(|r| r.header("tickler-job-id"))
        .collect();
    assert_eq!(ids, [fine.to_string()], "held jobs are not sent");
    // Out of Redis, not overdue, listed by the held filter.
    eventually(Duration::from_secs(5), || async {
        (!env.redis_holds(held).await && !env.redis_holds(fixed).await).then_some(())
    })
    .await
    .expect("held jobs leave Redis");
    let (_, stats) = env.get("/v1/stats").await;
    assert_eq!(stats["overdue"]["count"], 0, "{stats}");
    let (_, page) = env.get(&format!("/v1/jobs?held=true&topic={topic}")).await;
    let listed: Vec<u64> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(listed, [held, fixed], "{page}");
    let (_, page) = env.get(&format!("/v1/jobs?held=false&topic={topic}")).await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 1, "{page}");
    let (_, metrics) = env.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tickler_jobs_held_total")
                && l.contains("payload_schema")
                && l.ends_with(" 2")),
        "{metrics}"
    );

    // Still failing: a release without force is refused, nothing changes.
    let (status, answer) = env
        .post(&format!("/v1/jobs/{held}/release"), json!({}))
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("payload_schema")),
        "{answer}"
    );
    assert!(job(&env, held).await["held_at"].is_string());
    // A job not held cannot be released.
    let (status, answer) = env
        .post(&format!("/v1/jobs/{fine}/release"), json!({}))
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("not_held"))
    );

    // A payload that matches releases it.
    let version = job(&env, fixed).await["version"].clone();
    let (status, answer) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{fixed}"),
            Some(json!({"version": version, "payload": {"amount": "still wrong"}}).to_string()),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("payload_schema")),
        "{answer}"
    );
    let (status, answer) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{fixed}"),
            Some(json!({"version": version, "payload": {"amount": 7}}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    env.status_await(fixed, "dispatched", Duration::from_secs(15))
        .await;

    // Forced: sent as it is, once.
    let (status, answer) = env
        .post(&format!("/v1/jobs/{held}/release"), json!({"force": true}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["held_at"].is_null(), "{answer}");
    env.status_await(held, "dispatched", Duration::from_secs(15))
        .await;
    let records = records_read(&consumer, 3, Duration::from_secs(5)).await;
    let mut ids: Vec<String> = records
        .iter()
        .filter_map(|r| r.header("tickler-job-id").map(str::to_owned))
        .collect();
    ids.sort();
    let mut expected = vec![fixed.to_string(), held.to_string()];
    expected.sort();
    assert_eq!(ids, expected, "each released job produced once");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_edited_by_hand_into_nonsense_holds_only_its_topic() {
    let env = env_start().await;
    let topic = env.topic.clone();
    let other = topic_new(&env).await;
    let stuck = env
        .job_create(json!({"topic": topic, "delay_ms": 3000, "payload": {"amount": 1}}))
        .await["id"]
        .as_u64()
        .unwrap();
    let free = env
        .job_create(json!({"topic": other, "delay_ms": 3000, "payload": {"amount": 1}}))
        .await["id"]
        .as_u64()
        .unwrap();
    for text in ["{not json", r#"{"type": 12}"#] {
        sqlx::query(
            "INSERT INTO topic_controls (topic, paused, payload_schema, updated_by) \
             VALUES (?, FALSE, ?, 'sql') ON DUPLICATE KEY UPDATE payload_schema = ?",
        )
        .bind(&topic)
        .bind(text)
        .bind(text)
        .execute(&env.sql)
        .await
        .unwrap();
        // Every instance reads the controls within a second: then creates
        // on the topic are refused, saying why.
        let refused = eventually(Duration::from_secs(5), || async {
            let (status, answer) = env
                .post(
                    "/v1/jobs",
                    json!({"topic": topic, "delay_ms": 0, "payload": {"amount": 1}}),
                )
                .await;
            (status == 400).then_some(answer)
        })
        .await
        .expect("creates refused");
        assert_eq!(refused["error"]["code"], "payload_schema", "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("does not compile"),
            "{refused}"
        );
    }
    // Its due job is held, never sent unchecked; the other topic's goes.
    env.status_await(free, "dispatched", Duration::from_secs(15))
        .await;
    let job = held_await(&env, stuck).await;
    assert_eq!(job["status"], "pending");
    let (status, _) = env.get("/healthz").await;
    assert_eq!(status, 200, "the instance is fine");
    let (_, view) = env.get(&format!("/v1/topics/{topic}")).await;
    assert_eq!(
        view["payload_schema"],
        json!({"type": 12}),
        "shown as stored"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_jobs_are_released_in_bulk_and_go_out_once() {
    let env = env_start().await;
    let topic = env.topic.clone();
    let consumer = consumer_from_beginning(&env.config.kafka.brokers, &topic);
    // Three created while the schema allows them, due in 3 s, held when due;
    // one due tomorrow that the new schema allows: pending, never held.
    let (status, _) = schema_set(&env, &topic, json!({"type": "object"})).await;
    assert_eq!(status, 200);
    let mut held = Vec::new();
    for n in 0..3 {
        let job = env
            .job_create(
                json!({"topic": topic, "delay_ms": 3000, "payload": {"amount": format!("n{n}")}}),
            )
            .await;
        held.push(job["id"].as_u64().unwrap());
    }
    let later = env
        .job_create(json!({"topic": topic, "delay_ms": 86_400_000, "payload": {"amount": 1}}))
        .await["id"]
        .as_u64()
        .unwrap();
    let (status, _) = schema_set(&env, &topic, order_schema()).await;
    assert_eq!(status, 200);
    for id in &held {
        held_await(&env, *id).await;
    }
    let bulk = |body: Value| env.post("/v1/jobs/bulk", body);
    // A bad body is refused, and nothing is written.
    for bad in [
        json!({"filter": {"topic": topic, "held": true},
               "action": {"type": "release", "force": "yes"}, "dry_run": false}),
        json!({"filter": {"topic": topic, "held": "yes"},
               "action": {"type": "release"}, "dry_run": false}),
        json!({"filter": {"topic": topic},
               "action": {"type": "release", "topic": topic}, "dry_run": false}),
    ] {
        let (status, answer) = bulk(bad.clone()).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{bad}: {answer}"
        );
    }
    // Forced needs admin, as for one job.
    let writer = tickler_testkit::http_with_token(
        &tickler_testkit::token_create(&env.config.mysql.url, "writer", &["*"], &["write"]).await,
    );
    let (status, answer) = env
        .request_with(
            &writer,
            "POST",
            "/v1/jobs/bulk",
            Some(
                json!({"filter": {"topic": topic, "held": true},
                       "action": {"type": "release", "force": true}, "dry_run": false})
                .to_string(),
            ),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("forbidden_scope")),
        "{answer}"
    );
    assert_eq!(bulk_ops_count(&env).await, 0, "no operation recorded");
    for id in &held {
        assert!(is_held(&env, *id).await, "job {id} still held");
    }

    // The preview: `held` narrows any action to held (or not held) jobs.
    let (status, preview) = bulk(json!({"filter": {"topic": topic, "held": true},
                                        "action": {"type": "release"}, "dry_run": true}))
    .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        (
            &preview["matched"],
            &preview["eligible"],
            &preview["applies_to"]
        ),
        (&json!(3), &json!(3), &json!("pending")),
        "{preview}"
    );
    let sampled: Vec<u64> = preview["sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(sampled, held, "{preview}");
    let (status, preview) = bulk(json!({"filter": {"topic": topic, "held": false},
                                        "action": {"type": "cancel"}, "dry_run": true}))
    .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        (&preview["matched"], &preview["eligible"]),
        (&json!(1), &json!(1)),
        "{preview}"
    );
    assert_eq!(preview["sample"][0]["id"], later, "{preview}");
    assert_eq!(bulk_ops_count(&env).await, 0, "a preview writes nothing");

    // Unforced while the payloads still fail: they stay held (conflicts),
    // the job not held is skipped, nothing is sent.
    let (status, started) = bulk(json!({"filter": {"topic": topic},
                                        "action": {"type": "release"}, "dry_run": false}))
    .await;
    assert_eq!(status, 202, "{started}");
    let op = bulk_done(&env, started["id"].as_u64().unwrap()).await;
    assert_eq!(
        (
            &op["total"],
            &op["changed"],
            &op["skipped"],
            &op["conflicts"]
        ),
        (&json!(4), &json!(0), &json!(1), &json!(3)),
        "{op}"
    );
    for id in &held {
        assert!(is_held(&env, *id).await, "job {id} still held");
    }

    // Forced, two of them and the job not held: released and sent as
    // they are (this attempt waived), the other skipped.
    let forced = [held[0], held[1]];
    let (status, started) = bulk(json!({"filter": {"ids": [held[0], held[1], later]},
                                        "action": {"type": "release", "force": true},
                                        "dry_run": false}))
    .await;
    assert_eq!(status, 202, "{started}");
    let forced_op = started["id"].as_u64().unwrap();
    let op = bulk_done(&env, forced_op).await;
    assert_eq!(
        (
            &op["total"],
            &op["changed"],
            &op["skipped"],
            &op["conflicts"]
        ),
        (&json!(3), &json!(2), &json!(1), &json!(0)),
        "{op}"
    );
    for id in forced {
        env.status_await(id, "dispatched", Duration::from_secs(15))
            .await;
        let waived: Option<u32> =
            sqlx::query_scalar("SELECT schema_waived_attempt FROM jobs WHERE id = ?")
                .bind(id)
                .fetch_one(&env.sql)
                .await
                .unwrap();
        assert_eq!(waived, Some(1), "job {id}'s attempt 1 waived");
        let (_, history) = env.get(&format!("/v1/jobs/{id}/history")).await;
        let actors: Vec<&str> = history["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["actor"].as_str())
            .collect();
        assert!(
            actors.contains(&format!("bulk:{forced_op}").as_str()),
            "{history}"
        );
    }
    assert!(is_held(&env, held[2]).await);
    assert_eq!(env.job_status(later).await, "pending");

    // The schema relaxed, the last one is released checked, filtered by
    // `held: true`, and sent.
    let (status, _) = schema_set(&env, &topic, json!({"type": "object"})).await;
    assert_eq!(status, 200);
    let released = eventually(Duration::from_secs(5), || async {
        // Each instance reads the controls within a second.
        let (status, started) = bulk(json!({"filter": {"topic": topic, "held": true},
                                            "action": {"type": "release"}, "dry_run": false}))
        .await;
        assert_eq!(status, 202, "{started}");
        let op = bulk_done(&env, started["id"].as_u64().unwrap()).await;
        (op["changed"] == 1).then_some(op)
    })
    .await
    .expect("released once the schema allows it");
    assert_eq!(
        (
            &released["total"],
            &released["skipped"],
            &released["conflicts"]
        ),
        (&json!(1), &json!(0), &json!(0)),
        "{released}"
    );
    env.status_await(held[2], "dispatched", Duration::from_secs(15))
        .await;
    let waived: Option<u32> =
        sqlx::query_scalar("SELECT schema_waived_attempt FROM jobs WHERE id = ?")
            .bind(held[2])
            .fetch_one(&env.sql)
            .await
            .unwrap();
    assert_eq!(waived, None, "checked, not waived");

    // Each held job produced once; the job not held stays pending.
    let records = records_read(&consumer, 4, Duration::from_secs(5)).await;
    let mut ids: Vec<String> = records
        .iter()
        .filter_map(|r| r.header("tickler-job-id").map(str::to_owned))
        .collect();
    ids.sort();
    let mut expected: Vec<String> = held.iter().map(u64::to_string).collect();
    expected.sort();
    assert_eq!(ids, expected, "each released job produced once");
    assert_eq!(env.job_status(later).await, "pending");
    env.finish().await;
}
