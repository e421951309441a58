//! `tickler jobs` as an operator runs it against a live tickler: every
//! subcommand does what its help says, `--json` gives the API's answers,
//! and the exit status says what happened (0 done, 1 refused with the
//! API's code, 2 usage, 3 unreachable). And `tickler --help` describes
//! every command.

use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use tickler_testkit::TestEnv;

/// Runs `tickler jobs ARGS` against `env`'s API with its admin token.
async fn jobs(env: &TestEnv, args: &[&str]) -> Output {
    jobs_with(env, &env.admin_secret, args).await
}

async fn jobs_with(env: &TestEnv, token: &str, args: &[&str]) -> Output {
    let mut all = vec!["jobs"];
    all.extend_from_slice(args);
    tickler_with(env, token, &all).await
}

/// Runs `tickler ARGS` against `env`'s API with `token`.
async fn tickler_with(env: &TestEnv, token: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tickler"));
    command
        .args(args)
        .env("TICKLER_URL", &env.base_url)
        .env("TICKLER_TOKEN", token)
        .env("TICKLER_LOG", "warn")
        .stdin(Stdio::null());
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json_of(output: &Output) -> Value {
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(output));
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("not JSON ({err}): {}", stdout(output)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_jobs_subcommand_works_against_a_live_tickler() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();

    let created = json_of(
        &jobs(
            &env,
            &[
                "create",
                "--topic",
                &topic,
                "--key",
                "cli-1",
                "--in",
                "2h",
                "--payload",
                r#"{"n":1}"#,
                "--header",
                "source=cli",
                "--json",
            ],
        )
        .await,
    );
    let id = created["id"].as_u64().expect("an id");
    assert_eq!(created["payload"], json!({"n": 1}));
    assert_eq!(created["headers"]["source"], "cli");

    let got = jobs(&env, &["get", &id.to_string()]).await;
    assert_eq!(got.status.code(), Some(0));
    assert!(
        stdout(&got).contains("pending") && stdout(&got).contains(&topic),
        "{}",
        stdout(&got)
    );

    let listed = json_of(
        &jobs(
            &env,
            &["list", "--topic", &topic, "--status", "pending", "--json"],
        )
        .await,
    );
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(listed["jobs"][0]["id"].as_u64(), Some(id));
    let table = stdout(&jobs(&env, &["list", "--topic", &topic]).await);
    assert!(
        table.starts_with("id") && table.contains("cli-1") && table.contains("1 jobs"),
        "{table}"
    );

    let moved = json_of(
        &jobs(
            &env,
            &[
                "move",
                &id.to_string(),
                "--at",
                "2031-01-01T00:00:00Z",
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(moved["run_at"], "2031-01-01T00:00:00.000Z");

    let history = json_of(&jobs(&env, &["history", &id.to_string(), "--json"]).await);
    let events = history["events"].as_array().unwrap();
    assert_eq!(events.len(), 2, "created, then moved: {history}");
    assert_eq!(events[1]["run_at"], "2031-01-01T00:00:00.000Z");

    // Refusals: exit 1 with the API's code.
    let refused = jobs(&env, &["redrive", &id.to_string()]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("not_dead"),
        "{}",
        stderr(&refused)
    );

    let cancelled = jobs(&env, &["cancel", &id.to_string()]).await;
    assert_eq!(cancelled.status.code(), Some(0), "{}", stderr(&cancelled));
    assert_eq!(env.job_status(id).await, "cancelled");
    let too_late = jobs(&env, &["move", &id.to_string(), "--in", "1h"]).await;
    assert_eq!(too_late.status.code(), Some(1));
    assert!(
        stderr(&too_late).contains("not_pending"),
        "{}",
        stderr(&too_late)
    );

    let missing = jobs(&env, &["get", "999999999"]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("not_found"));
    let bad_token = jobs_with(&env, "wrong", &["get", &id.to_string()]).await;
    assert_eq!(bad_token.status.code(), Some(1));
    assert!(
        stderr(&bad_token).contains("unauthorized"),
        "{}",
        stderr(&bad_token)
    );

    // Usage: exit 2, nothing sent.
    for args in [
        vec!["move", "1"],
        vec!["create", "--topic", "t", "--in", "soon"],
        vec![
            "create",
            "--topic",
            "t",
            "--in",
            "1m",
            "--payload",
            "{not json",
        ],
        vec!["list", "--bogus"],
    ] {
        let output = jobs(&env, &args).await;
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_and_schedules_subcommands_work_against_a_live_tickler() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let topic_s = topic.as_str();
    let paused = json_of(
        &tickler_with(
            &env,
            &env.admin_secret,
            &["topics", "pause", topic_s, "--json"],
        )
        .await,
    );
    assert_eq!(paused["paused"], true);
    let listed = tickler_with(&env, &env.admin_secret, &["topics", "list"]).await;
    assert!(stdout(&listed).contains(topic_s), "{}", stdout(&listed));
    let paced = json_of(
        &tickler_with(
            &env,
            &env.admin_secret,
            &["topics", "pace", topic_s, "250", "--json"],
        )
        .await,
    );
    assert_eq!(paced["max_per_second"], 250);
    let cleared = json_of(
        &tickler_with(
            &env,
            &env.admin_secret,
            &["topics", "pace", topic_s, "--clear", "--json"],
        )
        .await,
    );
    assert_eq!(cleared["max_per_second"], Value::Null);
    let resumed = json_of(
        &tickler_with(
            &env,
            &env.admin_secret,
            &["topics", "resume", topic_s, "--json"],
        )
        .await,
    );
    assert_eq!(resumed["paused"], false);
    let refused = tickler_with(&env, &env.admin_secret, &["topics", "pace", topic_s, "0"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("invalid_request"));

    let created = json_of(
        &tickler_with(
            &env,
            &env.admin_secret,
            &[
                "schedules",
                "create",
                "--topic",
                topic_s,
                "--key",
                "renewal",
                "--cron",
                "0 9 1 * *",
                "--time-zone",
                "Europe/Berlin",
                "--misfire",
                "skip",
                "--json",
            ],
        )
        .await,
    );
    let id = created["id"].as_u64().unwrap();
    let id_text = id.to_string();
    let id_s = id_text.as_str();
    let shown = tickler_with(&env, &env.admin_secret, &["schedules", "get", id_s]).await;
    assert!(
        stdout(&shown).contains("0 9 1 * * (Europe/Berlin)"),
        "{}",
        stdout(&shown)
    );
    assert!(
        stdout(&shown).contains("renewal@"),
        "the pending occurrence: {}",
        stdout(&shown)
    );
    let paused = json_of(
        &tickler_with(
            &env,
            &env.admin_secret,
            &["schedules", "pause", id_s, "--json"],
        )
        .await,
    );
    assert_eq!(paused["status"], "paused");
    let resumed = json_of(
        &tickler_with(
            &env,
            &env.admin_secret,
            &["schedules", "resume", id_s, "--json"],
        )
        .await,
    );
    assert_eq!(resumed["status"], "active");
    let listed = tickler_with(
        &env,
        &env.admin_secret,
        &["schedules", "list", "--status", "active"],
    )
    .await;
    assert!(stdout(&listed).contains("renewal"));
    let preview = tickler_with(
        &env,
        &env.admin_secret,
        &[
            "schedules",
            "preview",
            "--cron",
            "30 2 * * *",
            "--time-zone",
            "Europe/Berlin",
            "--after",
            "2027-03-27T12:00:00Z",
            "--count",
            "1",
        ],
    )
    .await;
    assert!(
        stdout(&preview).contains("2027-03-28T03:00:00.000+02:00"),
        "{}",
        stdout(&preview)
    );
    let deleted = tickler_with(&env, &env.admin_secret, &["schedules", "delete", id_s]).await;
    assert_eq!(deleted.status.code(), Some(0), "{}", stderr(&deleted));
    let gone = tickler_with(&env, &env.admin_secret, &["schedules", "get", id_s]).await;
    assert_eq!(gone.status.code(), Some(1));
    assert!(stderr(&gone).contains("not_found"));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_previews_asks_and_applies() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let mut ids = Vec::new();
    for i in 0..6 {
        let job = env
            .job_create(json!({"key": format!("b{i}"), "delay_ms": 3_600_000}))
            .await;
        ids.push(job["id"].as_u64().unwrap());
    }

    let preview = jobs(&env, &["bulk", "cancel", "--topic", &topic, "--dry-run"]).await;
    assert_eq!(preview.status.code(), Some(0), "{}", stderr(&preview));
    assert!(
        stdout(&preview).contains("6 jobs match; 6 are pending"),
        "{}",
        stdout(&preview)
    );
    assert_eq!(
        env.job_status(ids[0]).await,
        "pending",
        "a preview changes nothing"
    );

    // Without a terminal to ask on, it refuses to guess.
    let unasked = jobs(&env, &["bulk", "cancel", "--topic", &topic]).await;
    assert_eq!(unasked.status.code(), Some(2));
    assert!(stderr(&unasked).contains("--yes"), "{}", stderr(&unasked));
    assert_eq!(env.job_status(ids[0]).await, "pending");

    let usage = jobs(&env, &["bulk", "shift", "--topic", &topic, "--yes"]).await;
    assert_eq!(usage.status.code(), Some(2), "shift needs --by");

    let applied = json_of(
        &jobs(
            &env,
            &[
                "bulk",
                "cancel",
                "--topic",
                &topic,
                "--key-prefix",
                "b",
                "--yes",
                "--json",
            ],
        )
        .await,
    );
    assert_eq!(applied["status"], "done", "{applied}");
    assert_eq!(applied["changed"], 6);
    for id in ids {
        assert_eq!(env.job_status(id).await, "cancelled");
    }
    env.finish().await;
}

#[test]
fn an_unreachable_api_is_exit_3() {
    let output = Command::new(env!("CARGO_BIN_EXE_tickler"))
        .args(["jobs", "get", "1", "--url", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3));
    assert!(
        stderr(&output).contains("cannot reach tickler"),
        "{}",
        stderr(&output)
    );
    let output = Command::new(env!("CARGO_BIN_EXE_tickler"))
        .args(["jobs", "get", "1", "--url", "127.0.0.1:8080"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(2),
        "an address without a scheme is a usage error"
    );
}

#[test]
fn help_describes_every_command_and_serve_names_every_role() {
    let help = Command::new(env!("CARGO_BIN_EXE_tickler"))
        .arg("--help")
        .output()
        .unwrap();
    let help = stdout(&help);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .collect();
    assert!(commands.len() >= 9, "{help}");
    for line in &commands {
        let mut words = line.split_whitespace();
        let name = words.next().unwrap();
        assert!(words.count() >= 3, "`{name}` has no description: {line:?}");
    }
    for command in ["serve", "jobs", "doctor", "demo", "bench"] {
        assert!(
            commands.iter().any(|l| l.trim_start().starts_with(command)),
            "no {command} in {help}"
        );
    }
    let serve = commands
        .iter()
        .find(|l| l.trim_start().starts_with("serve"))
        .unwrap();
    for role in tickler::config::Role::ALL.map(|role| role.as_str()) {
        assert!(
            serve.contains(role),
            "serve's help omits the {role} role: {serve}"
        );
    }
    let demo = commands
        .iter()
        .find(|l| l.trim_start().starts_with("demo"))
        .unwrap();
    assert!(demo.contains("Kafka"), "{demo}");
    let bench = commands
        .iter()
        .find(|l| l.trim_start().starts_with("bench"))
        .unwrap();
    assert!(bench.contains("Measure"), "{bench}");
}
