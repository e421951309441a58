//! The consumer kits (Rust, Python, TypeScript) against the real services:
//! a handler that fails its first attempt and succeeds on the retry, then
//! sees the retry's record delivered again, leaves exactly one `ok` in the
//! job's history, is called once per attempt, and has its offsets committed
//! past every record.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::{json, Value};
use tickler_client::consumer::{headers_of, Event, JobRecord, Kit, Outcome, Reporter};
use tickler_testkit::{eventually, producer, unique, TestEnv};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A job on the test's topic that expects a result, due now, with three
/// attempts.
async fn job_expecting_a_result(env: &TestEnv) -> u64 {
    let job = env
        .job_create(json!({
            "payload": {"order": 7}, "key": "order-7", "delay_ms": 0,
            "expects_result": true, "max_attempts": 3, "ack_timeout_ms": 60000,
        }))
        .await;
    job["id"].as_u64().unwrap()
}

/// The job's history: how many times it became `succeeded`.
async fn oks_in_history(env: &TestEnv, id: u64) -> usize {
    let (status, history) = env.get(&format!("/v1/jobs/{id}/history")).await;
    assert_eq!(status, 200, "{history}");
    history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["status"] == "succeeded")
        .count()
}

/// Produces `job`'s record again on its topic, as tickler would after a
/// crash between its produce and its mark.
async fn delivered_again(env: &TestEnv, job: &JobRecord) {
    let producer = producer(&env.config.kafka.brokers, &Default::default(), 0, 10_000).unwrap();
    let mut record = FutureRecord::to(&job.topic)
        .payload(&job.payload)
        .headers(headers_of(job));
    if let Some(key) = &job.key {
        record = record.key(key);
    }
    producer
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(err, _)| err)
        .unwrap();
}

/// Whether `group` has committed, on every partition of `topic`, the end
/// of the partition.
fn committed_to_the_end(brokers: &str, group: &str, topic: &str) -> bool {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let mut partitions = TopicPartitionList::new();
    for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
        partitions.add_partition(topic, partition.id());
    }
    let committed = consumer
        .committed_offsets(partitions, Duration::from_secs(10))
        .unwrap();
    committed.elements().iter().all(|element| {
        let (_, high) = consumer
            .fetch_watermarks(topic, element.partition(), Duration::from_secs(10))
            .unwrap();
        match element.offset() {
            Offset::Offset(at) => at == high,
            _ => high == 0,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_kit_retries_once_skips_a_duplicate_and_reports_one_ok() {
    let env = TestEnv::start().await;
    let brokers = env.config.kafka.brokers.clone();
    let group = unique("kit-rust-");
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &brokers)
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "50");
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let kit = Kit::new(
        &config,
        &[&env.topic],
        Reporter::topic(&brokers, &env.config.results.topic).unwrap(),
    )
    .unwrap()
    .on_event({
        let events = events.clone();
        move |event| events.lock().unwrap().push(event.clone())
    });
    let calls: Arc<Mutex<Vec<JobRecord>>> = Arc::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let calls = calls.clone();
        async move {
            kit.run(
                move |job| {
                    let calls = calls.clone();
                    async move {
                        let attempt = job.attempt;
                        calls.lock().unwrap().push(job);
                        if attempt == 1 {
                            Outcome::retry_after("the first try fails", Duration::from_millis(100))
                        } else {
                            Outcome::Ok
                        }
                    }
                },
                async {
                    let _ = stopped.await;
                },
            )
            .await
        }
    });

    // A record that is not tickler's, and one whose attempt was edited
    // into nonsense, ahead of the job: each skipped, neither in the way.
    let producer = producer(&env.config.kafka.brokers, &Default::default(), 0, 10_000).unwrap();
    for headers in [
        OwnedHeaders::new(),
        OwnedHeaders::new()
            .insert(Header {
                key: "tickler-job-id",
                value: Some("1"),
            })
            .insert(Header {
                key: "tickler-attempt",
                value: Some("first"),
            }),
    ] {
        producer
            .send(
                FutureRecord::<(), _>::to(&env.topic)
                    .payload("{}")
                    .headers(headers),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(err, _)| err)
            .unwrap();
    }
    let id = job_expecting_a_result(&env).await;
    env.status_await(id, "succeeded", Duration::from_secs(60))
        .await;
    let skipped: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Skipped { why, .. } => Some(why.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped.iter().any(|why| why.contains("tickler-attempt")));
    let second = calls.lock().unwrap().last().cloned().unwrap();
    assert_eq!((second.id, second.attempt), (id, 2));
    assert_eq!(second.key.as_deref(), Some(&b"order-7"[..]));
    assert_eq!(second.json::<Value>().unwrap(), json!({"order": 7}));
    delivered_again(&env, &second).await;
    let duplicate = eventually(Duration::from_secs(30), || async {
        events
            .lock()
            .unwrap()
            .contains(&Event::Duplicate { id, attempt: 2 })
            .then_some(())
    })
    .await;
    assert!(duplicate.is_some(), "the kit saw the record again");
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();

    let attempts: Vec<u32> = calls.lock().unwrap().iter().map(|j| j.attempt).collect();
    assert_eq!(attempts, [1, 2], "the handler ran once per attempt");
    assert_eq!(oks_in_history(&env, id).await, 1, "exactly one ok");
    let handled: Vec<Event> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Event::Handled { .. }))
        .cloned()
        .collect();
    assert_eq!(
        handled,
        [
            Event::Handled {
                id,
                attempt: 1,
                outcome: Outcome::retry_after("the first try fails", Duration::from_millis(100)),
            },
            Event::Handled {
                id,
                attempt: 2,
                outcome: Outcome::Ok,
            },
        ]
    );
    assert!(
        committed_to_the_end(&brokers, &group, &env.topic),
        "the group committed every record it reported"
    );
    env.finish().await;
}

fn venv(name: &str) -> PathBuf {
    let home = std::env::var("HOME").unwrap();
    PathBuf::from(home)
        .join(".cache/tickler/venv/bin")
        .join(name)
}

/// `program` run in `dir` with the live test's settings: the server, an
/// admin token, the topic, the brokers and the results topic. Panics with
/// its output unless it succeeds.
async fn run_against(env: &TestEnv, dir: PathBuf, program: PathBuf, args: &[&str]) -> String {
    let mut command = std::process::Command::new(&program);
    command
        .args(args)
        .current_dir(dir)
        .env("PYTHONPATH", root().join("clients/python"))
        .env("TICKLER_URL", &env.base_url)
        .env("TICKLER_TOKEN", &env.admin_secret)
        .env("TICKLER_TOPIC", &env.topic)
        .env("TICKLER_RESULTS_TOPIC", &env.config.results.topic)
        .env("KAFKA_BROKERS", &env.config.kafka.brokers);
    let output = tickler_testkit::output(command).await;
    let text = tickler_testkit::output_text(&output);
    assert!(output.status.success(), "{program:?} {args:?}:\n{text}");
    text
}

/// clients/python/tests/test_consumer.py: the kit's pure parts, and the
/// live run reporting over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_kit_retries_once_skips_a_duplicate_and_reports_one_ok() {
    let env = TestEnv::start().await;
    let text = run_against(
        &env,
        root().join("clients/python"),
        venv("python"),
        &[
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_consumer.py",
        ],
    )
    .await;
    assert!(
        text.contains("5 passed") && !text.contains("skipped"),
        "every test ran, the live one too:\n{text}"
    );
    env.finish().await;
}

/// clients/typescript/test/consumer.test.mjs: the kit's pure parts, and
/// the live run reporting on the results topic. The package is compiled
/// into a scratch directory (its own dist/ belongs to `npm pack`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_kit_retries_once_skips_a_duplicate_and_reports_one_ok() {
    let env = TestEnv::start().await;
    let package = root().join("clients/typescript");
    let dir = tickler_testkit::scratch_dir();
    std::fs::create_dir_all(dir.join("test")).unwrap();
    std::fs::copy(
        package.join("test/consumer.test.mjs"),
        dir.join("test/consumer.test.mjs"),
    )
    .unwrap();
    std::fs::copy(package.join("package.json"), dir.join("package.json")).unwrap();
    std::os::unix::fs::symlink(package.join("node_modules"), dir.join("node_modules")).unwrap();
    let out = dir.join("dist");
    run_against(
        &env,
        package.clone(),
        package.join("node_modules/.bin/tsc"),
        &["-p", "tsconfig.json", "--outDir", out.to_str().unwrap()],
    )
    .await;
    let text = run_against(
        &env,
        dir.clone(),
        PathBuf::from("node"),
        &["--test", "test/consumer.test.mjs"],
    )
    .await;
    assert!(
        text.contains("# pass 5") && text.contains("# skipped 0"),
        "every test ran, the live one too:\n{text}"
    );
    env.finish().await;
}

/// A report that cannot be made keeps its record uncommitted: the kit
/// stopped while tickler is out of reach leaves the record to the group's
/// next consumer, which handles and reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_whose_report_never_arrived_is_not_committed() {
    let env = TestEnv::start().await;
    let brokers = env.config.kafka.brokers.clone();
    let group = unique("kit-rust-");
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &brokers)
        .set("group.id", &group)
        .set("auto.offset.reset", "earliest")
        .set("auto.commit.interval.ms", "100")
        .set("fetch.wait.max.ms", "50");
    let id = job_expecting_a_result(&env).await;

    // Reports over HTTP with a token tickler does not know (401): a
    // misconfiguration to wait out, never a report dropped.
    let nowhere = tickler_client::Client::new(&env.base_url, Some("tkl_unknown")).unwrap();
    let events: Arc<Mutex<Vec<Event>>> = Arc::default();
    let kit = Kit::new(&config, &[&env.topic], Reporter::Api(nowhere))
        .unwrap()
        .on_event({
            let events = events.clone();
            move |event| events.lock().unwrap().push(event.clone())
        });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        kit.run(|_job| async { Outcome::Ok }, async {
            let _ = stopped.await;
        })
        .await
    });
    let failing = eventually(Duration::from_secs(30), || async {
        events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Event::Trouble { what, .. } if what.starts_with("reporting")))
            .then_some(())
    })
    .await;
    assert!(failing.is_some(), "the report failed and is being retried");
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    assert!(
        !events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Event::Handled { .. })),
        "nothing counts as handled without its report"
    );
    assert!(
        !events
            .lock()
            .unwrap()
            .iter()
            .any(|e| matches!(e, Event::Refused { .. })),
        "a refused token is not a report refused for good"
    );
    assert!(
        !committed_to_the_end(&brokers, &group, &env.topic),
        "the unreported record is not committed"
    );
    assert_eq!(env.job_status(id).await, "dispatched");

    // The group's next consumer gets it again and reports it.
    let calls: Arc<Mutex<Vec<u32>>> = Arc::default();
    let kit = Kit::new(
        &config,
        &[&env.topic],
        Reporter::topic(&brokers, &env.config.results.topic).unwrap(),
    )
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let calls = calls.clone();
        async move {
            kit.run(
                move |job| {
                    calls.lock().unwrap().push(job.attempt);
                    async { Outcome::Ok }
                },
                async {
                    let _ = stopped.await;
                },
            )
            .await
        }
    });
    env.status_await(id, "succeeded", Duration::from_secs(60))
        .await;
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    assert_eq!(*calls.lock().unwrap(), [1], "handed over again, attempt 1");
    assert!(committed_to_the_end(&brokers, &group, &env.topic));
    env.finish().await;
}
