//! `/readyz` (#47): ready when MySQL and Redis answer, the schema is this
//! build's, and a dispatcher holds shards; not ready while draining, with
//! Redis gone or the schema behind — each finding named. `/healthz` stays
//! liveness: MySQL alone.

use std::time::Duration;

use serde_json::Value;
use tickler::config::Role;
use tickler_testkit::procs::PrivateRedis;
use tickler_testkit::{eventually, TestEnv};

async fn ready(base_url: &str) -> (u16, Value) {
    let response = reqwest::get(format!("{base_url}/readyz")).await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_when_the_stores_answer_the_schema_is_current_and_shards_are_held() {
    let redis = PrivateRedis::start().await;
    let redis_url = redis.url();
    let env = TestEnv::start_with(|c| c.redis.url = redis_url).await;
    let answer = eventually(Duration::from_secs(10), || async {
        let (status, answer) = ready(&env.base_url).await;
        (status == 200).then_some(answer)
    })
    .await
    .expect("ready once its shards are held");
    assert_eq!(answer["status"], "ready");
    for check in ["mysql", "redis", "schema", "shards", "draining"] {
        assert_eq!(answer["checks"][check], "ok", "{answer}");
    }

    // An instance without the dispatcher needs no shard.
    let mut api_only = env.config.clone();
    api_only.roles = vec![Role::Api];
    api_only.api.addr = "127.0.0.1:0".into();
    let second = tickler::app::start(api_only, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    let second_url = format!("http://{}", second.http_addr.unwrap());
    let (status, answer) = ready(&second_url).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["checks"].get("shards").is_none(), "{answer}");

    // Draining: not ready, still alive.
    second.drain();
    let (status, answer) = ready(&second_url).await;
    assert_eq!(
        (status, &answer["checks"]["draining"]),
        (503, &Value::from("draining: stopping"))
    );
    let health = reqwest::get(format!("{second_url}/healthz")).await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    second.shutdown().await;

    // The schema behind this build's.
    let newest = tickler::store::schema_newest();
    sqlx::query("UPDATE refinery_schema_history SET version = -version WHERE version = ?")
        .bind(newest)
        .execute(&env.sql)
        .await
        .unwrap();
    let (status, answer) = ready(&env.base_url).await;
    assert_eq!(status, 503);
    assert!(
        answer["checks"]["schema"]
            .as_str()
            .unwrap()
            .contains("run tickler migrate"),
        "{answer}"
    );
    sqlx::query("UPDATE refinery_schema_history SET version = -version WHERE version = ?")
        .bind(-newest)
        .execute(&env.sql)
        .await
        .unwrap();

    // Redis gone: not ready; alive (jobs are still taken).
    drop(redis);
    let (status, answer) = ready(&env.base_url).await;
    assert_eq!(status, 503);
    assert!(
        answer["checks"]["redis"]
            .as_str()
            .unwrap()
            .starts_with("does not answer"),
        "{answer}"
    );
    let health = reqwest::get(format!("{}/healthz", env.base_url))
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    env.finish().await;
}
