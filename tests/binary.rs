//! The `tickler` binary as operators run it: configuration errors at
//! start-up, and a clean drain on SIGTERM.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tickler::kafka;
use tickler_testkit::procs::free_port;
use tickler_testkit::{database_create, database_drop, eventually, records_read, unique};

fn tickler() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tickler"));
    command.env("TICKLER_LOG", "warn");
    // Each tickler its own results topic and group: tests run in parallel.
    command.env("TICKLER_RESULTS_TOPIC", unique("tickler-results-"));
    command.env("TICKLER_RESULTS_GROUP", unique("tickler-t-"));
    command
}

#[test]
fn a_bad_setting_stops_start_up_with_a_message_naming_it() {
    let output = tickler()
        .arg("migrate")
        .env("TICKLER_CLUSTER_SHARDS", "0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid configuration: cluster.shards"),
        "{stderr}"
    );

    let output = tickler()
        .args(["migrate", "--config", "/nonexistent/tickler.toml"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tickler.toml"), "{stderr}");
}

/// A flat name of before the sections still works for one release, and
/// says what it is called now; `tickler config` prints the new form.
#[test]
fn a_flat_setting_name_is_read_and_its_new_name_said() {
    let output = tickler()
        .arg("config")
        .env("TICKLER_WINDOW_MS", "300000")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("TICKLER_WINDOW_MS is now TICKLER_LOADER_WINDOW_MS"),
        "{stderr}"
    );
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["loader"]["window_ms"], 300_000, "{shown}");
    assert!(shown.get("window_ms").is_none(), "{shown}");
}

#[test]
fn an_anonymous_api_beyond_loopback_is_refused_at_start_up() {
    let output = tickler()
        .arg("serve")
        .env("TICKLER_API_AUTH", "none")
        .env("TICKLER_API_ADDR", "0.0.0.0:0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid configuration: api.auth")
            && stderr.contains("api.allow_anonymous"),
        "{stderr}"
    );
}

fn kill_term(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_batch_in_hand_and_exits_cleanly() {
    let (db_name, url) = database_create().await;
    let topic = unique("tickler-test-");
    kafka::topic_ensure(&tickler_testkit::kafka_brokers(), &topic, 2)
        .await
        .unwrap();
    // The token comes from the CLI, as an operator makes it: the secret
    // alone on the last line.
    let made = tickler()
        .args([
            "token",
            "create",
            "drain-test",
            "--topics",
            "tickler-test-*",
            "--scope",
            "write",
        ])
        .env("TICKLER_MYSQL_URL", &url)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let stdout = String::from_utf8_lossy(&made.stdout);
    let secret = stdout.lines().last().unwrap().trim().to_owned();
    assert!(secret.starts_with("tkl_"), "{stdout}");
    let listed = tickler()
        .args(["token", "list"])
        .env("TICKLER_MYSQL_URL", &url)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("drain-test") && !listed.contains(&secret),
        "{listed}"
    );
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = tickler()
        .arg("serve")
        .env("TICKLER_MYSQL_URL", &url)
        .env("TICKLER_REDIS_PREFIX", unique("tickler-t-"))
        .env("TICKLER_API_ADDR", &addr)
        // One shard, small batches: the 400 jobs below take many passes.
        .env("TICKLER_CLUSTER_SHARDS", "1")
        .env("TICKLER_DISPATCHER_BATCH", "20")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let http = tickler_testkit::http_with_token(&secret);
    let up = eventually(Duration::from_secs(20), || async {
        let response = http
            .get(format!("http://{addr}/healthz"))
            .send()
            .await
            .ok()?;
        response.status().is_success().then_some(())
    })
    .await;
    assert!(up.is_some(), "tickler serves");

    let consumer =
        tickler_testkit::consumer_from_beginning(&tickler_testkit::kafka_brokers(), &topic);
    // All due at one instant, after they have all been created.
    let run_at = (chrono::Utc::now() + chrono::Duration::seconds(3)).to_rfc3339();
    for n in 0..400 {
        let body = serde_json::json!({"topic": topic, "payload": n, "run_at": run_at});
        let response = http
            .post(format!("http://{addr}/v1/jobs"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
    }
    // Stop while the jobs are being dispatched.
    records_read(&consumer, 1, Duration::from_secs(10)).await;
    kill_term(&child);
    let exited = eventually(Duration::from_secs(20), || {
        let status = child.try_wait().unwrap();
        async move { status }
    })
    .await
    .expect("tickler exits after SIGTERM");
    assert!(exited.success(), "clean exit, got {exited:?}");

    let sql = sqlx::MySqlPool::connect(&url).await.unwrap();
    let in_hand: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'dispatching'")
        .fetch_one(&sql)
        .await
        .unwrap();
    assert_eq!(in_hand, 0, "every claimed batch was finished before exit");
    let dispatched: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'dispatched'")
            .fetch_one(&sql)
            .await
            .unwrap();
    eprintln!("dispatched before exit: {dispatched} of 400");
    // Everything marked dispatched is on Kafka (one record was read above).
    let records = records_read(&consumer, dispatched as usize - 1, Duration::from_secs(10)).await;
    assert_eq!(records.len() + 1, dispatched as usize);
    let pending: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'pending'")
        .fetch_one(&sql)
        .await
        .unwrap();
    assert_eq!(
        pending + dispatched,
        400,
        "the rest wait, pending, for the next start"
    );
    sql.close().await;
    database_drop(&db_name).await;
}

/// `api.drain_ms`: on SIGTERM `/readyz` answers 503 while the API still
/// serves (`/healthz` 200), for the drain, then the process exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_readiness_before_the_roles_stop() {
    let (db_name, url) = database_create().await;
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = tickler()
        .arg("serve")
        .env("TICKLER_MYSQL_URL", &url)
        .env("TICKLER_REDIS_PREFIX", unique("tickler-t-"))
        .env("TICKLER_API_ADDR", &addr)
        .env("TICKLER_API_DRAIN_MS", "3000")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let status = |path: &'static str| {
        let http = http.clone();
        let addr = addr.clone();
        async move {
            http.get(format!("http://{addr}{path}"))
                .send()
                .await
                .ok()
                .map(|r| r.status().as_u16())
        }
    };
    let ready = eventually(Duration::from_secs(20), || async {
        (status("/readyz").await == Some(200)).then_some(())
    })
    .await;
    assert!(ready.is_some(), "ready once up");
    kill_term(&child);
    let drained = eventually(Duration::from_secs(2), || async {
        (status("/readyz").await == Some(503)).then_some(())
    })
    .await;
    assert!(drained.is_some(), "not ready once draining");
    assert_eq!(status("/healthz").await, Some(200), "still serving");
    let exited = eventually(Duration::from_secs(20), || {
        let status = child.try_wait().unwrap();
        async move { status }
    })
    .await
    .expect("tickler exits after the drain");
    assert!(exited.success(), "clean exit, got {exited:?}");
    database_drop(&db_name).await;
}

/// The benchmark harness in its seconds-long mode: every stage runs and
/// every job arrives. No timing is asserted (figures are in
/// docs/benchmarks.md, from a release build).
#[test]
fn bench_smoke_completes_and_every_job_arrives() {
    let output = tickler()
        .args(["bench", "--smoke"])
        .env("TICKLER_REDIS_PREFIX", unique("tickler-t-"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench failed:\n{stdout}\n{stderr}");
    for figure in [
        "schedule:",
        "lateness:",
        "burst:",
        "results:",
        "proof:",
        "consumed:",
        "limits ttl:",
        "limits overdue:",
        "limits in flight:",
        "redis:",
        "reconcile:",
        "instances: 2 tickler serve processes",
        "failover:",
    ] {
        assert!(stdout.contains(figure), "prints {figure}\n{stdout}");
    }
}

/// Every `TICKLER_<SETTING>=value` the README and docs/ show is taken by
/// `tickler config` as written, and the setting it names comes out as the
/// value says: a documented form that stops working fails here. (Variables
/// that are not settings — TICKLER_LOG, TICKLER_TOKEN, the tests' own — are
/// left to the tests of what reads them.)
#[test]
fn every_documented_environment_setting_is_taken_as_written() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let settings = tickler::config::Config::keys();
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (at, _) in text.match_indices("TICKLER_") {
            let rest = &text[at + "TICKLER_".len()..];
            let name_len = rest
                .find(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                .unwrap_or(rest.len());
            let (name, rest) = rest.split_at(name_len);
            let Some(rest) = rest.strip_prefix('=') else {
                continue;
            };
            let lower = name.to_ascii_lowercase();
            let Some(setting) = settings.iter().find(|path| path.replace('.', "_") == lower) else {
                continue;
            };
            // 'quoted', or up to the next space or backtick.
            let value = match rest.strip_prefix('\'') {
                Some(quoted) => &quoted[..quoted.find('\'').unwrap()],
                None => &rest[..rest.find([' ', '`', '\n', ')']).unwrap_or(rest.len())],
            };
            if value == "FILE" || value.contains('…') {
                continue;
            }
            let output = tickler()
                .arg("config")
                .env(format!("TICKLER_{name}"), value)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                output.status.success(),
                "{}: TICKLER_{name}={value} is refused: {stderr}",
                file.display()
            );
            let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
            let taken = setting.split('.').fold(&shown, |value, key| &value[key]);
            let first = value
                .trim_matches(|c| c == '{' || c == '[')
                .split([',', '='])
                .next()
                .unwrap()
                .trim()
                .trim_matches('"');
            assert!(
                taken.to_string().contains(first),
                "{}: TICKLER_{name}={value} became {taken}",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 3,
        "the docs show the environment forms ({checked} found)"
    );
}

#[test]
fn a_map_setting_in_the_wrong_form_is_refused_with_the_form_that_works() {
    let output = tickler()
        .arg("config")
        .env("TICKLER_KAFKA_OPTIONS", "security.protocol=SSL")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("TICKLER_KAFKA_OPTIONS") && stderr.contains("{security.protocol=\"SSL\""),
        "{stderr}"
    );
}
