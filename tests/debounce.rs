//! `on_conflict: "debounce"` (#60): a later create for the same (topic,
//! key) moves the pending job, never past its generation's first request +
//! `max_delay_ms`; once the job went out, the next debounce starts a new
//! generation linked to the one before. Times are asserted on the stored
//! `schedule_time`, never on wall time.

use std::time::Duration;

use chrono::NaiveDateTime;
use serde_json::{json, Value};
use tickler_testkit::{records_read, TestEnv};

/// A debounce of `key` on the test's topic, with `extra` fields.
async fn debounce(env: &TestEnv, key: &str, extra: Value) -> (u16, Value) {
    let mut body = json!({"topic": env.topic, "key": key, "on_conflict": "debounce"});
    for (name, value) in extra.as_object().expect("an object") {
        body[name] = value.clone();
    }
    env.post("/v1/jobs", body).await
}

/// (schedule_time, debounce_first_at) as stored.
async fn stored_times(env: &TestEnv, id: u64) -> (NaiveDateTime, Option<NaiveDateTime>) {
    sqlx::query_as("SELECT schedule_time, debounce_first_at FROM jobs WHERE id = ?")
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap()
}

fn id_of(job: &Value) -> u64 {
    job["id"].as_u64().expect("a job id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_debounces_move_the_pending_job_and_never_past_its_ceiling() {
    let env = TestEnv::start().await;
    let (status, first) = debounce(
        &env,
        "k",
        json!({"delay_ms": 60_000, "max_delay_ms": 120_000, "payload": {"n": 1}}),
    )
    .await;
    assert_eq!(status, 201, "{first}");
    let id = id_of(&first);
    let (at, anchor) = stored_times(&env, id).await;
    let anchor = anchor.expect("the first request time is kept");
    let ceiling = anchor + chrono::Duration::milliseconds(120_000);
    assert!(at > anchor);

    let (status, moved) = debounce(
        &env,
        "k",
        json!({"delay_ms": 90_000, "max_delay_ms": 120_000, "payload": {"n": 2}}),
    )
    .await;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(id_of(&moved), id, "the same job, moved");
    assert_eq!(moved["debounced"], json!(true));
    assert_eq!(moved["capped"], json!(false));
    assert_eq!(moved["payload"], json!({"n": 2}));
    let (moved_at, _) = stored_times(&env, id).await;
    assert!(
        moved_at > at && moved_at <= ceiling,
        "{moved_at} in ({at}, {ceiling}]"
    );

    // Asked for later than the ceiling: held to it, by delay or by time.
    for (n, extra) in [
        (3, json!({"delay_ms": 600_000})),
        (
            4,
            json!({"run_at": (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339()}),
        ),
    ] {
        let mut extra = extra;
        extra["payload"] = json!({ "n": n });
        let (status, capped) = debounce(&env, "k", extra).await;
        assert_eq!(status, 200, "{capped}");
        assert_eq!(capped["capped"], json!(true), "{capped}");
        assert_eq!(capped["payload"], json!({ "n": n }));
        let (capped_at, kept_anchor) = stored_times(&env, id).await;
        assert_eq!(
            capped_at, ceiling,
            "never past the first request + max_delay_ms"
        );
        assert_eq!(kept_anchor, Some(anchor), "the anchor never moves");
    }
    let (_, view) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(view["run_at"], view["debounce_until"], "{view}");
    assert_eq!(view["payload"], json!({"n": 4}));
    assert!(view.get("generation").is_none() && view.get("previous_id").is_none());
    assert_eq!(env.jobs_count().await, 1);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debounce_after_the_job_went_out_starts_a_new_generation_linked_to_the_old() {
    let env = TestEnv::start().await;
    let (status, first) = debounce(&env, "k", json!({"delay_ms": 0, "payload": {"g": 0}})).await;
    assert_eq!(status, 201, "{first}");
    let old = id_of(&first);
    env.status_await(old, "dispatched", Duration::from_secs(20))
        .await;
    let (_, old_history) = env.get(&format!("/v1/jobs/{old}/history")).await;

    let (status, renewed) = debounce(
        &env,
        "k",
        json!({"delay_ms": 600_000, "max_delay_ms": 900_000, "payload": {"g": 1}}),
    )
    .await;
    assert_eq!(status, 201, "a new job: {renewed}");
    let new = id_of(&renewed);
    assert_ne!(new, old);
    assert_eq!(renewed["generation"], json!(1));
    assert_eq!(renewed["previous_id"], json!(old));
    assert_eq!(renewed["key"], json!("k"));
    assert!(renewed["debounce_until"].is_string(), "{renewed}");

    // The old row keeps its state, its key (as shown) and its history.
    let (_, was) = env.get(&format!("/v1/jobs/{old}")).await;
    assert_eq!(was["status"], json!("dispatched"));
    assert_eq!(was["key"], json!("k"));
    assert!(was["kafka"].is_object());
    let (_, history) = env.get(&format!("/v1/jobs/{old}/history")).await;
    assert_eq!(history, old_history);
    let (retired, held): (Option<Vec<u8>>, Option<Vec<u8>>) =
        sqlx::query_as("SELECT retired_key, job_key FROM jobs WHERE id = ?")
            .bind(old)
            .fetch_one(&env.sql)
            .await
            .unwrap();
    assert_eq!((retired.as_deref(), held), (Some(&b"k"[..]), None));

    // The next debounce moves the new generation; a plain create with the
    // same request finds it.
    let (status, moved) = debounce(&env, "k", json!({"delay_ms": 700_000})).await;
    assert_eq!((status, id_of(&moved)), (200, new), "{moved}");
    let (_, found) = env
        .get(&format!("/v1/jobs?topic={}&key=k", env.topic))
        .await;
    let listed: Vec<u64> = found["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(id_of)
        .collect();
    assert_eq!(listed, vec![new], "only the live generation holds the key");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_debounces_on_a_finished_key_make_exactly_one_new_job() {
    let env = TestEnv::start().await;
    let (_, first) = debounce(&env, "race", json!({"delay_ms": 0})).await;
    let old = id_of(&first);
    env.status_await(old, "dispatched", Duration::from_secs(20))
        .await;
    let answers = futures::future::join_all(
        (0..8).map(|n| debounce(&env, "race", json!({"delay_ms": 600_000, "payload": n}))),
    )
    .await;
    let created = answers.iter().filter(|(status, _)| *status == 201).count();
    let moved = answers.iter().filter(|(status, _)| *status == 200).count();
    assert_eq!((created, moved), (1, 7), "{answers:?}");
    let ids: std::collections::BTreeSet<u64> = answers.iter().map(|(_, job)| id_of(job)).collect();
    assert_eq!(ids.len(), 1, "every answer names the one new job");
    let pending: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM jobs WHERE status = 'pending' AND previous_id = ?",
    )
    .bind(old)
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!(pending, 1);
    assert_eq!(env.jobs_count().await, 2);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debounced_job_is_produced_once_with_its_last_payload() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let mut id = None;
    for n in 0..5 {
        let (status, job) = debounce(
            &env,
            "once",
            json!({"delay_ms": 1_500, "max_delay_ms": 3_000, "payload": {"n": n}}),
        )
        .await;
        assert!(status == 201 || status == 200, "{job}");
        assert_eq!(*id.get_or_insert(id_of(&job)), id_of(&job));
    }
    let id = id.unwrap();
    env.status_await(id, "dispatched", Duration::from_secs(20))
        .await;
    // A second record would come within moments of the first.
    let records = records_read(&consumer, 2, Duration::from_secs(4)).await;
    let ours: Vec<_> = records
        .iter()
        .filter(|record| record.key.as_deref() == Some("once"))
        .collect();
    assert_eq!(ours.len(), 1, "produced once");
    assert_eq!(ours[0].payload, br#"{"n":4}"#.to_vec());
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_debounces_write_nothing() {
    let env = TestEnv::start_with(|c| c.jobs.max_schedule_ahead_days = 10).await;
    let topic = env.topic.clone();
    let cases = [
        json!({"topic": topic, "key": "k", "delay_ms": 10, "on_conflict": "merge"}),
        json!({"topic": topic, "key": "k", "delay_ms": 10, "on_conflict": 1}),
        json!({"topic": topic, "delay_ms": 10, "on_conflict": "debounce"}),
        json!({"topic": topic, "key": "k", "delay_ms": 10, "on_conflict": "debounce", "max_delay_ms": 0}),
        json!({"topic": topic, "key": "k", "delay_ms": 10, "on_conflict": "debounce", "max_delay_ms": -1}),
        json!({"topic": topic, "key": "k", "delay_ms": 10, "on_conflict": "debounce", "max_delay_ms": 864_000_001}),
        json!({"topic": topic, "key": "k", "delay_ms": 10, "max_delay_ms": 1000}),
        json!({"topic": topic, "key": "k", "delay_ms": 10, "on_conflict": "reject", "max_delay_ms": 1000}),
    ];
    for body in cases {
        let (status, reply) = env.post("/v1/jobs", body.clone()).await;
        assert_eq!(
            (status, reply["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{body} → {reply}"
        );
        let (status, reply) = env.post("/v1/jobs/batch", json!({"jobs": [body]})).await;
        assert_eq!(status, 200);
        assert_eq!(
            reply["results"][0]["error"]["code"],
            json!("invalid_request")
        );
    }
    assert_eq!(env.jobs_count().await, 0);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_debounces_item_by_item() {
    let env = TestEnv::start().await;
    let item = |n: u32| json!({"topic": env.topic, "key": "b", "delay_ms": 600_000 + n, "on_conflict": "debounce", "payload": n});
    let (status, reply) = env
        .post("/v1/jobs/batch", json!({"jobs": [item(1), item(2)]}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(reply["results"][0]["result"], json!("created"), "{reply}");
    assert_eq!(reply["results"][1]["result"], json!("debounced"), "{reply}");
    assert_eq!(reply["results"][0]["id"], reply["results"][1]["id"]);
    let (_, job) = env
        .get(&format!("/v1/jobs/{}", reply["results"][0]["id"]))
        .await;
    assert_eq!(job["payload"], json!(2));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debounce_of_a_job_in_flight_answers_in_flight_and_writes_nothing() {
    let env = TestEnv::start().await;
    let (_, job) = debounce(&env, "f", json!({"delay_ms": 600_000})).await;
    let id = id_of(&job);
    // A claim, by hand: far in the future, no dispatcher holds it.
    sqlx::query("UPDATE jobs SET status = 'dispatching' WHERE id = ?")
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    let before = stored_times(&env, id).await;
    let (status, reply) = debounce(&env, "f", json!({"delay_ms": 900_000})).await;
    assert_eq!(status, 409, "{reply}");
    assert_eq!(reply["error"]["code"], json!("in_flight"));
    assert_eq!(stored_times(&env, id).await, before);
    assert_eq!(env.jobs_count().await, 1);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_edited_anchor_costs_only_its_row() {
    let env = TestEnv::start().await;
    let (_, edited) = debounce(
        &env,
        "edited",
        json!({"delay_ms": 10_000, "max_delay_ms": 60_000}),
    )
    .await;
    let (_, other) = debounce(
        &env,
        "other",
        json!({"delay_ms": 10_000, "max_delay_ms": 60_000}),
    )
    .await;
    let (edited, other) = (id_of(&edited), id_of(&other));
    let created_at: NaiveDateTime = sqlx::query_scalar("SELECT created_at FROM jobs WHERE id = ?")
        .bind(edited)
        .fetch_one(&env.sql)
        .await
        .unwrap();
    // NULL, then a zero date (what a DATETIME holds of garbage): the row
    // reads without a ceiling shown, and a debounce counts from its
    // creation.
    let mut conn = env.sql.acquire().await.unwrap();
    for garbage in ["NULL", "'0000-00-00 00:00:00'"] {
        let set = sqlx::query("SET SESSION sql_mode = ''")
            .execute(&mut *conn)
            .await;
        set.unwrap();
        sqlx::query(&format!(
            "UPDATE jobs SET debounce_first_at = {garbage} WHERE id = ?"
        ))
        .bind(edited)
        .execute(&mut *conn)
        .await
        .unwrap();
        let (status, view) = env.get(&format!("/v1/jobs/{edited}")).await;
        assert_eq!(status, 200, "{view}");
        let (status, moved) = debounce(&env, "edited", json!({"delay_ms": 86_400_000})).await;
        assert_eq!(status, 200, "{garbage}: {moved}");
        assert_eq!(moved["capped"], json!(true));
        let (at, _) = stored_times(&env, edited).await;
        assert_eq!(at, created_at + chrono::Duration::milliseconds(60_000));
        let (status, _) = env.get("/v1/jobs").await;
        assert_eq!(status, 200, "a listing still reads");
    }
    drop(conn);
    let (status, moved) = debounce(&env, "other", json!({"delay_ms": 20_000})).await;
    assert_eq!((status, moved["capped"].clone()), (200, json!(false)));
    let (_, view) = env.get(&format!("/v1/jobs/{other}")).await;
    assert!(view["debounce_until"].is_string());
    env.finish().await;
}
