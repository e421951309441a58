//! The client libraries (#47, #63) against a live tickler: the Python
//! package in clients/python and the TypeScript one in clients/typescript
//! are what the served OpenAPI document generates (no operation or field
//! drifts), and their README's examples run as written.

use std::path::{Path, PathBuf};
use std::process::Command;

use tickler_testkit::TestEnv;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn venv(name: &str) -> PathBuf {
    let home = std::env::var("HOME").unwrap();
    PathBuf::from(home)
        .join(".cache/tickler/venv/bin")
        .join(name)
}

/// Every file under `dir`, relative to it.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "__pycache__") {
                    stack.push(path);
                }
            } else {
                out.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The live server's OpenAPI document, written to `dir/openapi.json`.
async fn served_document(env: &TestEnv, dir: &Path) -> PathBuf {
    let spec: serde_json::Value = reqwest::get(format!("{}/v1/openapi.json", env.base_url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let spec_file = dir.join("openapi.json");
    std::fs::write(&spec_file, serde_json::to_vec(&spec).unwrap()).unwrap();
    spec_file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_package_is_what_the_served_document_generates() {
    let env = TestEnv::start().await;
    let dir = tickler_testkit::scratch_dir();
    let spec_file = served_document(&env, &dir).await;
    let generated = dir.join("tickler_client");
    let output = Command::new(venv("openapi-python-client"))
        .args(["generate", "--meta", "none", "--path"])
        .arg(&spec_file)
        .arg("--output-path")
        .arg(&generated)
        .arg("--config")
        .arg(root().join("tests/client/generator.yaml"))
        .output()
        .expect("openapi-python-client runs (scripts/services tools)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let committed = root().join("clients/python/tickler_client");
    let made = files(&generated);
    let kept = files(&committed);
    let stale: Vec<&PathBuf> = made
        .iter()
        .filter(|file| {
            std::fs::read(committed.join(file)).ok() != std::fs::read(generated.join(file)).ok()
        })
        .collect();
    let extra: Vec<&PathBuf> = kept
        .iter()
        .filter(|file| !made.contains(file))
        .filter(|file| {
            !["kafka_headers.py", "consumer.py", "py.typed"].contains(&file.to_str().unwrap())
        })
        .collect();
    assert!(
        stale.is_empty() && extra.is_empty(),
        "clients/python/tickler_client differs from what the API's document generates \
         (regenerate it: clients/python/README.md): changed or missing {stale:?}, left over {extra:?}"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_readme_examples_run_against_a_live_server() {
    let env = TestEnv::start().await;
    let readme = std::fs::read_to_string(root().join("clients/python/README.md")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```python\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 2, "the API example and the Kafka one");
    for block in blocks {
        let (url, token, topic) = (
            env.base_url.clone(),
            env.admin_secret.clone(),
            env.topic.clone(),
        );
        let code = block.to_owned();
        let output = tokio::task::spawn_blocking(move || {
            Command::new(venv("python"))
                .arg("-c")
                .arg(&code)
                .env("PYTHONPATH", root().join("clients/python"))
                .env("TICKLER_URL", url)
                .env("TICKLER_TOKEN", token)
                .env("TICKLER_TOPIC", topic)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(
            output.status.success(),
            "{block}\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    env.finish().await;
}

/// clients/rust/README.md's example, as written there (the test below
/// checks the two are the same text).
async fn rust_readme_example(
    url: String,
    token: String,
    topic: String,
) -> Result<(), tickler_client::Error> {
    // README BEGIN
    use tickler_client::{Client, ErrorCode, JobChange, NewJob};

    let client = Client::new(&url, Some(&token))?;
    // A reminder 30 days out, idempotent on its key.
    let job = client
        .job_create(
            &NewJob::new(&topic, serde_json::json!({"user": 42}))
                .key("reminder-42")
                .delay_ms(30 * 86_400_000),
        )
        .await?;
    assert_eq!(job.status, "pending");
    // Moved a day later; the version guards against a concurrent change.
    let moved = client
        .job_modify(
            job.id,
            &JobChange::at_version(job.version).set("delay_ms", (31 * 86_400_000u64).into()),
        )
        .await?;
    assert!(moved.run_at > job.run_at);
    // The same version again: refused, with its code.
    let stale = client
        .job_modify(
            job.id,
            &JobChange::at_version(job.version).set("delay_ms", 0.into()),
        )
        .await
        .unwrap_err();
    assert_eq!(stale.code(), Some(&ErrorCode::VersionConflict));
    let cancelled = client.job_cancel(job.id).await?;
    assert_eq!(cancelled.outcome, "cancelled");
    // Many at once: each item's result, in order.
    let batch = client
        .jobs_create(&[
            NewJob::new(&topic, serde_json::json!(1))
                .key("a")
                .delay_ms(60_000),
            NewJob::new(&topic, serde_json::json!(2))
                .key("b")
                .delay_ms(60_000),
        ])
        .await?;
    assert!(batch.iter().all(|item| item.result == "created"));
    // README END
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_readme_example_runs_against_a_live_server() {
    let readme = std::fs::read_to_string(root().join("clients/rust/README.md")).unwrap();
    let block = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap();
    let source = std::fs::read_to_string(root().join("tests/clients.rs")).unwrap();
    let here = source
        .split("    // README BEGIN\n")
        .nth(1)
        .and_then(|rest| rest.split("    // README END").next())
        .unwrap();
    // The same code, however rustfmt lays it out.
    let code = |text: &str| -> String {
        text.chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .replace(",)", ")")
    };
    assert_eq!(code(block), code(here), "the README shows what runs here");

    let env = TestEnv::start().await;
    rust_readme_example(
        env.base_url.clone(),
        env.admin_secret.clone(),
        env.topic.clone(),
    )
    .await
    .unwrap();
    env.finish().await;
}

/// The Rust client tries a 429 again after its Retry-After, and gives up
/// with the code after its retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_retries_a_429_after_retry_after() {
    let env = TestEnv::start().await;
    let secret = tickler_testkit::token_create_limited(
        &env.config.mysql.url,
        "slow",
        &["*"],
        &["read"],
        Some(1),
        Some(0),
    )
    .await;
    let patient = tickler_client::Client::builder(&env.base_url)
        .token(&secret)
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    for _ in 0..3 {
        patient
            .request(reqwest::Method::GET, "/v1/topics", None)
            .await
            .unwrap();
    }
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1_500),
        "waited for the rate: {:?}",
        started.elapsed()
    );
    let hasty = tickler_client::Client::builder(&env.base_url)
        .token(&secret)
        .retries(0)
        .build()
        .unwrap();
    let refused = hasty
        .request(reqwest::Method::GET, "/v1/topics", None)
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&tickler_client::ErrorCode::RateLimited)
    );
    env.finish().await;
}

/// A consumer team's question, "what lands on my topic in the next hour",
/// from the Rust client with a read-only token scoped to its topic: the
/// jobs due there, minute by minute, and the topic's pace; another topic
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_forecasts_its_topic_with_a_read_only_token() {
    let env = TestEnv::start().await;
    // Buckets start at `from`, a whole minute; jobs half-way through two
    // of them.
    let now = chrono::Utc::now().timestamp();
    let from = chrono::DateTime::from_timestamp(now - now % 60, 0).unwrap();
    let at = |seconds: i64| {
        (from + chrono::Duration::seconds(seconds))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    for seconds in [330, 330, 1230] {
        env.job_create(serde_json::json!({"payload": {}, "run_at": at(seconds)}))
            .await;
    }
    let (status, _) = env
        .request(
            "PATCH",
            &format!("/v1/topics/{}", env.topic),
            Some(r#"{"max_per_second": 50}"#.to_owned()),
        )
        .await;
    assert_eq!(status, 200);
    let secret =
        tickler_testkit::token_create(&env.config.mysql.url, "team", &[&env.topic], &["read"])
            .await;
    let team = tickler_client::Client::new(&env.base_url, Some(&secret)).unwrap();
    let forecast = team
        .forecast(Some(&env.topic), Some(&at(0)), Some(&at(3600)), Some("1m"))
        .await
        .unwrap();
    assert_eq!(forecast.bucket_ms, 60_000);
    let due: Vec<u64> = forecast
        .buckets
        .iter()
        .map(|b| b.jobs)
        .filter(|n| *n > 0)
        .collect();
    assert_eq!(due, [2, 1], "two jobs in one minute, one in another");
    assert_eq!(forecast.buckets[5].jobs, 2, "in their minute");
    assert_eq!(forecast.topics.len(), 1);
    assert_eq!(forecast.topics[0].topic, env.topic);
    assert_eq!(forecast.topics[0].peak, 2);
    let topic = team.topic_get(&env.topic).await.unwrap();
    assert_eq!(topic["max_per_second"], 50);
    let refused = team
        .forecast(Some("someone-elses"), None, None, None)
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(&tickler_client::ErrorCode::ForbiddenTopic)
    );
    env.finish().await;
}

/// What #60 added to the API, through the Rust client: a wall-clock job
/// (and a zone tickler does not know), a debounce moving the pending job
/// of its key up to its ceiling, a retarget (and one refused for a key
/// taken there), a release of a job that is not held, a schedule triggered
/// (idempotent on its key) and backfilled (previewed, applied, rerun).
///
/// Long because it is one tour of the new calls against one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_speaks_wall_clock_debounce_retarget_and_schedule_runs() {
    use tickler_client::{Client, ErrorCode, JobChange, NewJob, Trigger};

    // The retarget's topic exists before tickler starts, so its pre-flight
    // check knows it from its first look.
    let target = tickler_testkit::unique("tickler-test-new-");
    tickler::kafka::topic_ensure(&tickler_testkit::kafka_brokers(), &target, 2)
        .await
        .expect("kafka is running (scripts/services)");
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let client = Client::new(&env.base_url, Some(&env.admin_secret)).unwrap();

    // 09:00 in Berlin on 1 July 2030: summer time, 07:00 UTC.
    let wall = client
        .job_create(
            &NewJob::new(&topic, serde_json::json!({"renewal": 42}))
                .key("renewal-42")
                .run_local("2030-07-01T09:00:00", "Europe/Berlin"),
        )
        .await
        .unwrap();
    assert_eq!(wall.run_at, "2030-07-01T07:00:00.000Z");
    assert_eq!(wall.run_local.as_deref(), Some("2030-07-01T09:00:00.000"));
    assert_eq!(wall.time_zone.as_deref(), Some("Europe/Berlin"));
    assert!(wall.tzdata_version.is_some(), "{wall:?}");
    let unknown = client
        .job_create(
            &NewJob::new(&topic, serde_json::json!(1))
                .run_local("2030-07-01T09:00:00", "Mars/Olympus"),
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Some(&ErrorCode::InvalidTimeZone));

    // Debounce: created, then moved, then held to first request + 5 min.
    let digest = |changes: u32, delay_ms: u64| {
        NewJob::new(&topic, serde_json::json!({ "changes": changes }))
            .key("digest")
            .delay_ms(delay_ms)
            .on_conflict("debounce")
            .max_delay_ms(300_000)
    };
    let first = client.job_create(&digest(1, 30_000)).await.unwrap();
    assert_eq!((first.status.as_str(), first.debounced), ("pending", None));
    let ceiling = first.debounce_until.clone().expect("a ceiling");
    let moved = client.job_create(&digest(2, 60_000)).await.unwrap();
    assert_eq!(moved.id, first.id);
    assert_eq!((moved.debounced, moved.capped), (Some(true), Some(false)));
    assert!(moved.run_at > first.run_at, "{moved:?}");
    let capped = client.job_create(&digest(3, 3_600_000)).await.unwrap();
    assert_eq!((capped.id, capped.capped), (first.id, Some(true)));
    assert_eq!(capped.run_at, ceiling);
    let now = client.job_get(first.id).await.unwrap();
    assert_eq!(now.payload, Some(serde_json::json!({"changes": 3})));

    // Not held: nothing to release.
    let refused = client.job_release(first.id, false).await.unwrap_err();
    assert_eq!(refused.code(), Some(&ErrorCode::NotHeld));

    // Retarget: the same job, on the other topic; refused where its key is
    // taken.
    let retargeted = client
        .job_modify(wall.id, &JobChange::at_version(wall.version).topic(&target))
        .await
        .unwrap();
    assert_eq!(
        (
            retargeted.id,
            retargeted.topic.as_str(),
            retargeted.key.as_deref()
        ),
        (wall.id, target.as_str(), Some("renewal-42"))
    );
    assert_eq!(retargeted.version, wall.version + 1);
    let make = |on: &str| {
        NewJob::new(on, serde_json::json!(1))
            .key("taken")
            .delay_ms(3_600_000)
    };
    client.job_create(&make(&target)).await.unwrap();
    let stays = client.job_create(&make(&topic)).await.unwrap();
    let taken = client
        .job_modify(
            stays.id,
            &JobChange::at_version(stays.version).topic(&target),
        )
        .await
        .unwrap_err();
    assert_eq!(taken.code(), Some(&ErrorCode::KeyConflict));

    // A schedule, hourly since three hours ago.
    let db_now = env.store.db_now().await.unwrap();
    let start = chrono::DateTime::from_timestamp(db_now.timestamp() - 3 * 3_600, 0).unwrap();
    let schedule = client
        .schedule_create(&serde_json::json!({
            "topic": topic, "key": "report", "every_ms": 3_600_000,
            "start_at": start.to_rfc3339(), "payload": {"report": "hourly"}}))
        .await
        .unwrap();
    let id = schedule["id"].as_u64().unwrap();
    let fresh = client.schedule_trigger(id, &Trigger::now()).await.unwrap();
    assert_eq!(fresh.schedule_id, Some(id));
    assert!(
        fresh
            .key
            .as_deref()
            .is_some_and(|k| k.starts_with("report@trigger-")),
        "{fresh:?}"
    );
    assert_eq!(fresh.payload, Some(serde_json::json!({"report": "hourly"})));
    let keyed = client
        .schedule_trigger(id, &Trigger::now().key("report-rerun").delay_ms(60_000))
        .await
        .unwrap();
    assert_eq!(keyed.key.as_deref(), Some("report-rerun"));
    let again = client
        .schedule_trigger(id, &Trigger::now().key("report-rerun").delay_ms(60_000))
        .await
        .unwrap();
    assert_eq!(again.id, keyed.id, "idempotent on its key");

    // Its first two hours backfilled: previewed, applied, and a rerun
    // creates nothing (whatever the materializer made meanwhile).
    let (from, to) = (
        tickler::domain::job::time_format(start),
        tickler::domain::job::time_format(start + chrono::Duration::hours(2)),
    );
    let preview = client
        .schedule_backfill(id, &from, &to, true)
        .await
        .unwrap();
    assert!(preview.dry_run);
    assert_eq!(preview.expected, 2, "{preview:?}");
    assert_eq!(preview.created + preview.existing, 2, "{preview:?}");
    let applied = client
        .schedule_backfill(id, &from, &to, false)
        .await
        .unwrap();
    assert!(!applied.dry_run);
    assert_eq!(applied.created + applied.existing, 2, "{applied:?}");
    let rerun = client
        .schedule_backfill(id, &from, &to, true)
        .await
        .unwrap();
    assert_eq!((rerun.created, rerun.existing), (0, 2), "{rerun:?}");
    let backwards = client
        .schedule_backfill(id, &to, &from, true)
        .await
        .unwrap_err();
    assert_eq!(backwards.code(), Some(&ErrorCode::InvalidInterval));
    env.finish().await;
}

/// The guide's blocks of `lang`.
fn guide_blocks(lang: &str) -> Vec<String> {
    let guide = std::fs::read_to_string(root().join("docs/testing-your-service.md")).unwrap();
    guide
        .split(&format!("```{lang}\n"))
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap().to_owned())
        .collect()
}

/// docs/testing-your-service.md's Python test, run by pytest as written
/// against a live `tickler dev`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_testing_guides_python_test_passes_against_tickler_dev() {
    let blocks = guide_blocks("python");
    assert_eq!(blocks.len(), 1, "one complete test");
    let env = TestEnv::start_dev_with(|_| {}).await;
    let dir = tickler_testkit::scratch_dir();
    let file = dir.join("test_reminders.py");
    std::fs::write(&file, &blocks[0]).unwrap();
    let (url, token, topic, brokers) = (
        env.base_url.clone(),
        env.admin_secret.clone(),
        env.topic.clone(),
        env.config.kafka.brokers.clone(),
    );
    let output = tokio::task::spawn_blocking(move || {
        Command::new(venv("python"))
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(&file)
            .current_dir(&dir)
            .env("PYTHONPATH", root().join("clients/python"))
            .env("TICKLER_URL", url)
            .env("TICKLER_TOKEN", token)
            .env("TICKLER_TOPIC", topic)
            .env("KAFKA_BROKERS", brokers)
            .output()
            .expect("pytest runs (scripts/services tools)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    env.finish().await;
}

/// docs/testing-your-service.md's Rust test, from its first `let
/// (topic, …)` on, as written there (the test below checks the page shows
/// this code).
async fn guide_rust_test(url: String, token: String, topic: String, brokers: String) {
    use std::time::Duration;

    use rdkafka::consumer::{Consumer, StreamConsumer};
    use rdkafka::{ClientConfig, Message};
    use tickler_client::{Client, NewJob};

    // GUIDE BEGIN
    /// The service's own code: remind the user 30 days from now.
    async fn schedule_renewal_reminder(
        tickler: &Client,
        topic: &str,
        user: u64,
    ) -> Result<u64, tickler_client::Error> {
        let payload = serde_json::json!({"user": user, "kind": "renewal"});
        let job = tickler
            .job_create(
                &NewJob::new(topic, payload)
                    .key(&format!("renewal-{user}"))
                    .delay_ms(30 * 86_400_000),
            )
            .await?;
        Ok(job.id)
    }

    let tickler = Client::new(&url, Some(&token)).unwrap();
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", format!("test-{}", std::process::id()))
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "50")
        .create()
        .unwrap();
    consumer.subscribe(&[&topic]).unwrap();
    let id = schedule_renewal_reminder(&tickler, &topic, 42)
        .await
        .unwrap();
    let early = tokio::time::timeout(Duration::from_secs(2), consumer.recv()).await;
    assert!(early.is_err(), "nothing before its time");

    tickler
        .dev_clock_advance(Duration::from_secs(30 * 86_400))
        .await
        .unwrap();

    let record = tokio::time::timeout(Duration::from_secs(15), consumer.recv())
        .await
        .expect("the reminder went out")
        .unwrap();
    assert_eq!(record.key(), Some(&b"renewal-42"[..]));
    let payload: serde_json::Value = serde_json::from_slice(record.payload().unwrap()).unwrap();
    assert_eq!(payload, serde_json::json!({"user": 42, "kind": "renewal"}));
    // tickler writes down the broker's ack a moment after the record can
    // reach a consumer.
    let mut sent = tickler.job_get(id).await.unwrap();
    for _ in 0..50 {
        if sent.extra["dispatched_at"].is_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        sent = tickler.job_get(id).await.unwrap();
    }
    let dispatched_at = sent.extra["dispatched_at"].as_str().unwrap();
    let now = tickler.dev_clock().await.unwrap().now;
    assert!(sent.run_at.as_str() <= dispatched_at && dispatched_at <= now.as_str());
    // GUIDE END
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_testing_guides_rust_test_passes_against_tickler_dev() {
    let blocks = guide_blocks("rust");
    assert_eq!(blocks.len(), 1, "one complete test");
    let source = std::fs::read_to_string(root().join("tests/clients.rs")).unwrap();
    let here = source
        .split("    // GUIDE BEGIN\n")
        .nth(1)
        .and_then(|rest| rest.split("    // GUIDE END").next())
        .unwrap();
    let code = |text: &str| -> String { text.chars().filter(|c| !c.is_whitespace()).collect() };
    assert!(
        code(&blocks[0]).contains(&code(here)),
        "the guide shows the code that runs here"
    );
    let env = TestEnv::start_dev_with(|_| {}).await;
    guide_rust_test(
        env.base_url.clone(),
        env.admin_secret.clone(),
        env.topic.clone(),
        env.config.kafka.brokers.clone(),
    )
    .await;
    env.finish().await;
}

fn typescript_dir() -> PathBuf {
    root().join("clients/typescript")
}

/// The package as `npm pack` makes it (built first, by its prepack),
/// installed in `dir`'s node_modules. One test at a time: a pack writes
/// the package's dist/.
fn typescript_packed(dir: &Path) {
    static PACKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = PACKING.lock().unwrap_or_else(|p| p.into_inner());
    let packs = dir.join("packs");
    std::fs::create_dir_all(&packs).unwrap();
    run_ok(
        &typescript_dir(),
        "npm",
        &["pack", "--pack-destination", packs.to_str().unwrap()],
        &[],
    );
    let tarball = std::fs::read_dir(&packs)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "tgz"))
        .expect("npm pack wrote a tarball");
    let modules = dir.join("node_modules");
    std::fs::create_dir_all(&modules).unwrap();
    run_ok(&modules, "tar", &["-xzf", tarball.to_str().unwrap()], &[]);
    std::fs::rename(modules.join("package"), modules.join("tickler-client")).unwrap();
}

/// `code` written to `dir/file` and compiled by tsc (strict, Node's
/// types) into `dir/out`, against the package installed there.
fn typescript_compiled(dir: &Path, file: &str, code: &str) {
    std::fs::write(dir.join(file), code).unwrap();
    std::fs::write(dir.join("package.json"), r#"{"type": "module"}"#).unwrap();
    let ts = typescript_dir();
    std::fs::write(
        dir.join("tsconfig.json"),
        serde_json::to_vec(&serde_json::json!({
            "compilerOptions": {
                "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
                "strict": true, "outDir": "out", "types": ["node"],
                "typeRoots": [ts.join("node_modules/@types")], "skipLibCheck": true
            },
            "files": [file]
        }))
        .unwrap(),
    )
    .unwrap();
    let tsc = ts.join("node_modules/.bin/tsc");
    run_ok(dir, tsc.to_str().unwrap(), &["-p", "tsconfig.json"], &[]);
}

/// Runs `program` with `args` in `dir`; panics with its output if it fails.
fn run_ok(dir: &Path, program: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|err| panic!("{program} runs (scripts/services tools): {err}"));
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{program} {args:?} in {dir:?}:\n{text}"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_package_is_what_the_served_document_generates() {
    let env = TestEnv::start().await;
    let dir = tickler_testkit::scratch_dir();
    let spec_file = served_document(&env, &dir).await;
    let ts = typescript_dir();
    let (spec_arg, schema, operations) = (
        spec_file.to_str().unwrap().to_owned(),
        dir.join("schema.ts"),
        dir.join("operations.ts"),
    );
    run_ok(
        &ts,
        "node_modules/.bin/openapi-typescript",
        &[&spec_arg, "--output", schema.to_str().unwrap()],
        &[],
    );
    let api_page = root().join("docs/api.md");
    run_ok(
        &ts,
        "node",
        &[
            "scripts/generate.mjs",
            &spec_arg,
            api_page.to_str().unwrap(),
            operations.to_str().unwrap(),
        ],
        &[],
    );
    for (made, committed) in [(schema, "src/schema.ts"), (operations, "src/operations.ts")] {
        assert!(
            std::fs::read(&made).unwrap() == std::fs::read(ts.join(committed)).unwrap(),
            "clients/typescript/{committed} differs from what the API's document generates \
             (regenerate it: clients/typescript/README.md)"
        );
    }
    env.finish().await;
}

/// The package as `npm pack` makes it: its unit tests (Node's runner), and
/// its README's example, type-checked against the packed types and run
/// against a live server; then the 429 retry against the server's own
/// rate limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_package_packs_and_its_readme_example_runs_against_a_live_server() {
    let env = TestEnv::start().await;
    let ts = typescript_dir();
    let dir = tickler_testkit::scratch_dir();
    typescript_packed(&dir);
    run_ok(&ts, "node", &["--test", "test/"], &[]);

    let readme = std::fs::read_to_string(ts.join("README.md")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```ts\n")
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap())
        .collect();
    assert_eq!(blocks.len(), 1, "the README's example");
    typescript_compiled(&dir, "example.ts", blocks[0]);
    let vars = [
        ("TICKLER_URL", env.base_url.as_str()),
        ("TICKLER_TOKEN", env.admin_secret.as_str()),
        ("TICKLER_TOPIC", env.topic.as_str()),
    ];
    let said = run_ok(&dir, "node", &["out/example.js"], &vars);
    assert!(said.contains("409 not_pending"), "{said}");
    assert!(
        said.contains("[ 'created', 'created', 'created' ]"),
        "{said}"
    );

    // A token allowed one request a second, none in reserve: three calls
    // in a row succeed only by waiting out each 429's Retry-After, and the
    // same calls without retries are refused.
    let secret = tickler_testkit::token_create_limited(
        &env.config.mysql.url,
        "slow",
        &["*"],
        &["read"],
        Some(1),
        Some(0),
    )
    .await;
    std::fs::write(
        dir.join("patient.mjs"),
        r#"import { TicklerClient } from "tickler-client";
const url = process.env.TICKLER_URL, token = process.env.TICKLER_TOKEN;
const patient = new TicklerClient({ url, token });
for (let i = 0; i < 3; i++) await patient.topicsList({});
try {
  await new TicklerClient({ url, token, retries: 0 }).topicsList({});
  throw new Error("not limited");
} catch (err) {
  if (err.code !== "rate_limited") throw err;
}
console.log("retried past the rate");
"#,
    )
    .unwrap();
    let said = run_ok(
        &dir,
        "node",
        &["patient.mjs"],
        &[
            ("TICKLER_URL", env.base_url.as_str()),
            ("TICKLER_TOKEN", &secret),
        ],
    );
    assert!(said.contains("retried past the rate"), "{said}");
    env.finish().await;
}

/// docs/testing-your-service.md's TypeScript test, compiled by tsc and run
/// by `node --test` as written against a live `tickler dev`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_testing_guides_typescript_test_passes_against_tickler_dev() {
    let blocks = guide_blocks("ts");
    assert_eq!(blocks.len(), 1, "one complete test");
    let env = TestEnv::start_dev_with(|_| {}).await;
    let dir = tickler_testkit::scratch_dir();
    typescript_packed(&dir);
    typescript_compiled(&dir, "reminders.test.ts", &blocks[0]);
    let said = run_ok(
        &dir,
        "node",
        &["--test", "out/reminders.test.js"],
        &[
            ("TICKLER_URL", env.base_url.as_str()),
            ("TICKLER_TOKEN", env.admin_secret.as_str()),
            ("TICKLER_TOPIC", env.topic.as_str()),
        ],
    );
    assert!(
        said.contains("# pass 1") && said.contains("# fail 0"),
        "{said}"
    );
    env.finish().await;
}

/// Each client packaged as its ecosystem expects, at the API's version:
/// the crate's file list, the wheel (with the consumer extra) and the npm
/// tarball (with the consumer entry), each with its changelog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_packages_at_the_apis_version() {
    let env = TestEnv::start().await;
    let dir = tickler_testkit::scratch_dir();
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(served_document(&env, &dir).await).unwrap()).unwrap();
    let version = spec["info"]["version"].as_str().unwrap().to_owned();
    env.finish().await;
    let manifest_version = |text: &str| -> String {
        text.lines()
            .find_map(|line| line.strip_prefix("version = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap()
            .to_owned()
    };

    // Rust: the crate as `cargo package` would upload it.
    let crate_manifest = std::fs::read_to_string(root().join("clients/rust/Cargo.toml")).unwrap();
    assert_eq!(manifest_version(&crate_manifest), version, "the crate");
    let listed = run_ok(
        &root(),
        "cargo",
        &[
            "package",
            "-p",
            "tickler-client",
            "--list",
            "--offline",
            "--allow-dirty",
        ],
        &[],
    );
    for file in ["README.md", "CHANGELOG.md", "src/lib.rs", "src/consumer.rs"] {
        assert!(
            listed.lines().any(|l| l == file),
            "the crate holds {file}:\n{listed}"
        );
    }

    // Python: a wheel built from a copy (a build writes beside its sources).
    let python = dir.join("python");
    run_ok(
        &root(),
        "cp",
        &["-r", "clients/python", python.to_str().unwrap()],
        &[],
    );
    let pyproject = std::fs::read_to_string(python.join("pyproject.toml")).unwrap();
    assert_eq!(manifest_version(&pyproject), version, "the wheel");
    let python_bin = venv("python");
    run_ok(
        &python,
        python_bin.to_str().unwrap(),
        &[
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            "wheels",
        ],
        &[],
    );
    let wheel = python.join(format!("wheels/tickler_client-{version}-py3-none-any.whl"));
    let contents = run_ok(
        &python,
        python_bin.to_str().unwrap(),
        &[
            "-c",
            "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print('\\n'.join(z.namelist())); \
             print(z.read(next(n for n in z.namelist() if n.endswith('METADATA'))).decode())",
            wheel.to_str().unwrap(),
        ],
        &[],
    );
    for needed in [
        "tickler_client/consumer.py",
        "tickler_client/kafka_headers.py",
        "tickler_client/py.typed",
        "Provides-Extra: consumer",
        "Requires-Dist: confluent-kafka>=2.3; extra == \"consumer\"",
    ] {
        assert!(
            contents.contains(needed),
            "the wheel has {needed}:\n{contents}"
        );
    }
    assert!(root().join("clients/python/CHANGELOG.md").exists());

    // TypeScript: the tarball `npm pack` makes, installed.
    typescript_packed(&dir);
    let installed = dir.join("node_modules/tickler-client");
    let package: serde_json::Value =
        serde_json::from_slice(&std::fs::read(installed.join("package.json")).unwrap()).unwrap();
    assert_eq!(package["version"], version, "the npm package");
    assert_eq!(
        package["exports"]["./consumer"]["import"],
        "./dist/consumer.js"
    );
    for file in [
        "dist/index.js",
        "dist/consumer.js",
        "dist/consumer.d.ts",
        "CHANGELOG.md",
    ] {
        assert!(installed.join(file).exists(), "the tarball holds {file}");
    }
}
