//! `tickler import` (#48): jobs from NDJSON and CSV with the API's checks —
//! refused lines named by line and code, in `--rejects` too, nothing
//! written for them — idempotent on (topic, key), so a rerun creates
//! nothing twice; a job due within the window is in Redis as soon as it
//! is written.

use std::process::Output;

use serde_json::{json, Value};
use tickler_testkit::{output, output_text as text, TestEnv};

async fn import(env: &TestEnv, args: &[&str]) -> Output {
    let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
    command.arg("import").args(args).arg("--quiet");
    output(command).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ndjson_file_is_loaded_checked_and_loaded_again_without_doubles() {
    let env = TestEnv::start().await;
    let dir = tickler_testkit::scratch_dir();
    let file = dir.join("jobs.ndjson");
    let topic = &env.topic;
    let lines = [
        json!({"topic": topic, "key": "a", "payload": {"n": 1}, "delay_ms": 3_600_000}).to_string(),
        json!({"topic": topic, "key": "b", "payload": {"n": 2}, "run_at": "2030-01-31T09:00:00Z",
               "headers": {"tenant": "acme"}}).to_string(),
        "{\"topic\": not json".to_owned(),
        json!({"topic": topic, "key": "soon", "payload": "now", "delay_ms": 300_000}).to_string(),
        json!({"topic": topic, "payload": "no key", "delay_ms": 1000}).to_string(),
        String::new(),
        json!({"topic": "tickler-no-such-topic-import", "key": "c", "payload": 1, "delay_ms": 1000}).to_string(),
        json!({"topic": topic, "key": "d", "payload": 1, "delay_ms": -5}).to_string(),
        json!({"topic": topic, "key": "e", "payload_base64": "AAEC", "delay_ms": 7_200_000,
               "max_attempts": 3}).to_string(),
    ];
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let rejects = dir.join("rejects.ndjson");
    let first = import(
        &env,
        &[
            file.to_str().unwrap(),
            "--rejects",
            rejects.to_str().unwrap(),
            "--batch",
            "2",
        ],
    )
    .await;
    let said = text(&first);
    assert_eq!(first.status.code(), Some(1), "{said}");
    assert!(
        said.contains("8 lines in")
            && said.contains(": 4 created, 0 already there (same topic and key), 4 refused"),
        "{said}"
    );
    let refused: Vec<Value> = std::fs::read_to_string(&rejects)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let named: Vec<(u64, &str)> = refused
        .iter()
        .map(|r| (r["line"].as_u64().unwrap(), r["code"].as_str().unwrap()))
        .collect();
    assert_eq!(
        named,
        vec![
            (3, "invalid_json"),
            (5, "invalid_key"),
            (7, "unknown_topic"),
            (8, "invalid_schedule")
        ],
        "{refused:?}"
    );
    assert!(
        said.contains("line 5: invalid_key: import needs a key on every job"),
        "{said}"
    );
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(count, 4);
    let actors: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT CAST(actor AS CHAR) FROM job_events")
            .fetch_all(&env.sql)
            .await
            .unwrap();
    assert_eq!(actors, vec!["import".to_owned()]);
    // As the API would have made them.
    let id: u64 = sqlx::query_scalar("SELECT id FROM jobs WHERE job_key = 'b'")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(
        (&job["run_at"], &job["headers"]["tenant"], &job["payload"]),
        (
            &json!("2030-01-31T09:00:00.000Z"),
            &json!("acme"),
            &json!({"n": 2})
        ),
        "{job}"
    );
    // Due in 5 minutes, inside the window the loader has already passed:
    // in Redis as soon as the import is done (the import indexes it; else
    // only the reconciler's overdue probe would find it, late).
    let soon: u64 = sqlx::query_scalar("SELECT id FROM jobs WHERE job_key = 'soon'")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert!(
        env.redis_holds(soon).await,
        "the import indexed the job due soon"
    );
    let far: u64 = sqlx::query_scalar("SELECT id FROM jobs WHERE job_key = 'a'")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert!(
        !env.redis_holds(far).await,
        "a job beyond the window stays out of Redis"
    );

    // Again: nothing twice.
    let again = import(&env, &[file.to_str().unwrap()]).await;
    let said = text(&again);
    assert!(said.contains(": 0 created, 4 already there"), "{said}");
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(count, 4);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_file_names_its_columns_in_a_header() {
    let env = TestEnv::start().await;
    let dir = tickler_testkit::scratch_dir();
    let file = dir.join("jobs.csv");
    let csv = format!(
        "topic,key,run_at,delay_ms,payload,headers\n\
         {t},r-1,2030-02-01T00:00:00Z,,\"{{\"\"user\"\": 1}}\",\"{{\"\"tenant\"\": \"\"acme\"\"}}\"\n\
         {t},r-2,,60000,plain text,\n\
         {t},r-3,,sixty,1,\n",
        t = env.topic
    );
    std::fs::write(&file, csv).unwrap();
    let output = import(&env, &[file.to_str().unwrap()]).await;
    let said = text(&output);
    assert!(
        said.contains("3 lines in") && said.contains(": 2 created"),
        "{said}"
    );
    assert!(
        said.contains("line 4: invalid_json: column delay_ms"),
        "{said}"
    );
    let id: u64 = sqlx::query_scalar("SELECT id FROM jobs WHERE job_key = 'r-1'")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["payload"], json!({"user": 1}), "{job}");
    assert_eq!(job["headers"]["tenant"], json!("acme"), "{job}");
    let id: u64 = sqlx::query_scalar("SELECT id FROM jobs WHERE job_key = 'r-2'")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(job["payload"], json!("plain text"), "{job}");
    env.finish().await;
}
