//! `tickler doctor` finds each inconsistency between MySQL, Redis and Kafka
//! that a test injects — a pending job Redis lacks, a Redis entry of a job
//! no longer pending, a claim past its lease, a dispatched job whose
//! recorded Kafka position holds another record or none — says how to fix
//! it, exits 1, and `--repair` fixes the safe ones.

use std::time::Duration;

use chrono::Utc;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde_json::json;
use tickler::config::Role;
use tickler::roles::doctor::{Doctor, DoctorConfig, DoctorReport as Report, Finding, Verdict};
use tickler_testkit::TestEnv;

/// A tickler serving only the API: nothing repairs what the test breaks.
async fn start() -> TestEnv {
    TestEnv::start_with(|c| c.roles = vec![Role::Api]).await
}

fn doctor(env: &TestEnv) -> Doctor {
    let config = DoctorConfig {
        settle: Duration::from_millis(200),
        ..DoctorConfig::from_config(&env.config)
    };
    Doctor::new(env.store.clone(), env.index.clone(), config)
}

fn finding<'a>(report: &'a Report, check: &str) -> &'a Finding {
    report
        .findings
        .iter()
        .find(|f| f.check == check)
        .unwrap_or_else(|| panic!("no {check} finding: {report:?}"))
}

fn doctor_bin(env: &TestEnv, args: &[&str]) -> std::process::Output {
    env.command(env!("CARGO_BIN_EXE_tickler"))
        .arg("doctor")
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_finds_each_injected_inconsistency_and_repairs_the_safe_ones() {
    let env = start().await;
    let healthy = doctor(&env).run_once().await;
    assert!(healthy.healthy(), "{healthy:?}");

    // Redis lost a pending job of the window.
    let lost = env
        .job_create(json!({"key": "lost", "delay_ms": 120_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    assert_eq!(env.index.job_remove_many(&[lost]).await.unwrap(), 1);
    // Redis holds a job cancelled behind its back.
    let cancelled = env
        .job_create(json!({"key": "cancelled", "delay_ms": 3_600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    sqlx::query("UPDATE jobs SET status = 'cancelled' WHERE id = ?")
        .bind(cancelled)
        .execute(&env.sql)
        .await
        .unwrap();
    env.index
        .job_add_many(&[(cancelled, Utc::now() + chrono::Duration::seconds(60))])
        .await
        .unwrap();
    // A claim whose dispatcher died an hour ago.
    let stuck = env
        .job_create(json!({"key": "stuck", "delay_ms": 3_600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET status = 'dispatching', claim_token = 7, \
         claim_expires_at = TIMESTAMPADD(HOUR, -1, UTC_TIMESTAMP(3)) WHERE id = ?",
    )
    .bind(stuck)
    .execute(&env.sql)
    .await
    .unwrap();

    let report = doctor(&env).run_once().await;
    assert!(!report.healthy());
    let window = finding(&report, "window");
    assert_eq!(
        (window.verdict, window.ids.clone()),
        (Verdict::Fail, vec![lost]),
        "{window:?}"
    );
    assert!(window.fix.as_deref().unwrap().contains("--repair"));
    let stale = finding(&report, "index_stale");
    assert_eq!(
        (stale.verdict, stale.ids.clone()),
        (Verdict::Fail, vec![cancelled])
    );
    let claims = finding(&report, "claims");
    assert_eq!((claims.verdict, claims.count), (Verdict::Fail, 1));
    assert!(
        claims
            .summary
            .contains(&format!("by topic: {} (1)", env.topic)),
        "the claims that wait are named by topic: {claims:?}"
    );
    assert_eq!(
        finding(&report, "clocks").verdict,
        Verdict::Ok,
        "{report:?}"
    );

    // The command says so and exits 1; --repair fixes them all.
    let output = doctor_bin(&env, &[]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.contains("FAIL window") && text.contains(&lost.to_string()),
        "{text}"
    );
    let output = doctor_bin(&env, &["--repair"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("repaired: indexed 1"), "{text}");
    assert!(env.index.job_locate(lost).await.unwrap().is_some());
    assert!(env.index.job_locate(cancelled).await.unwrap().is_none());
    assert_eq!(env.job_status(stuck).await, "pending");
    assert!(env.index.job_locate(stuck).await.unwrap().is_some());
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_reads_back_recorded_kafka_positions() {
    let env = start().await;
    let producer = tickler_testkit::producer(
        &env.config.kafka.brokers,
        &env.config.kafka.options,
        0,
        10_000,
    )
    .unwrap();
    let produce = |job_id: String| {
        let producer = producer.clone();
        let topic = env.topic.clone();
        async move {
            let headers = OwnedHeaders::new().insert(Header {
                key: tickler::domain::job::HEADER_JOB_ID,
                value: Some(job_id.as_bytes()),
            });
            producer
                .send(
                    FutureRecord::<str, [u8]>::to(&topic)
                        .key("k")
                        .payload(b"{}")
                        .headers(headers),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(err, _)| err)
                .unwrap()
        }
    };
    let mut ids = Vec::new();
    for key in ["right", "wrong", "beyond"] {
        ids.push(
            env.job_create(json!({"key": key, "delay_ms": 3_600_000}))
                .await["id"]
                .as_u64()
                .unwrap(),
        );
    }
    let record_of = |id: u64| id.to_string();
    // "right" is where it says; "wrong" points at another job's record;
    // "beyond" at an offset no record ever had.
    let right = produce(record_of(ids[0])).await;
    let other = produce("424242".to_owned()).await;
    let positions = [
        (ids[0], right.partition, right.offset),
        (ids[1], other.partition, other.offset),
        (ids[2], right.partition, 1_000_000),
    ];
    for (id, partition, offset) in positions {
        sqlx::query(
            "UPDATE jobs SET status = 'dispatched', kafka_partition = ?, kafka_offset = ?, \
             dispatched_at = UTC_TIMESTAMP(3) WHERE id = ?",
        )
        .bind(partition)
        .bind(offset)
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    }
    let report = doctor(&env).run_once().await;
    let positions = finding(&report, "kafka_positions");
    assert_eq!(positions.verdict, Verdict::Fail, "{positions:?}");
    let mut wrong = positions.ids.clone();
    wrong.sort_unstable();
    assert_eq!(wrong, vec![ids[1], ids[2]], "{positions:?}");
    assert!(
        positions.summary.contains("job 424242's record"),
        "{}",
        positions.summary
    );
    assert!(
        positions.summary.contains("past the end"),
        "{}",
        positions.summary
    );
    assert!(!report.healthy());
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_sees_a_database_clock_apart_and_a_results_backlog() {
    use tickler::index::Index;
    use tickler::store::{scratch, Actor, Store};
    use tickler_testkit::procs::PrivateMariadb;

    let mariadb = PrivateMariadb::start_faketime("+5s").await;
    let url = scratch::scratch_database_create(
        &mariadb.server_url(),
        "doctor",
        tickler::config::HandEdits::Trigger,
    )
    .await
    .unwrap();
    Store::migrate(&url).await.unwrap();
    let store = Store::connect_lazy(&url, 2, Actor::Reconciler).unwrap();
    let prefix = tickler_testkit::unique("tickler-t-");
    let config = tickler_testkit::test_config(&url, &prefix);
    let index = Index::connect(&config.redis.url, &prefix, config.cluster.shards)
        .await
        .unwrap();

    // Three reports nobody has consumed.
    tickler::kafka::topic_ensure(&config.kafka.brokers, &config.results.topic, 1)
        .await
        .unwrap();
    let producer =
        tickler_testkit::producer(&config.kafka.brokers, &config.kafka.options, 0, 10_000).unwrap();
    for _ in 0..3 {
        producer
            .send(
                FutureRecord::<str, [u8]>::to(&config.results.topic).payload(b"{}"),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(err, _)| err)
            .unwrap();
    }

    let doctor_config = DoctorConfig {
        settle: Duration::from_millis(200),
        lag_warn: 2,
        ..DoctorConfig::from_config(&config)
    };
    let doctor = Doctor::new(store.clone(), index, doctor_config);
    let report = doctor.run_once().await;
    let clocks = finding(&report, "clocks");
    assert_eq!(clocks.verdict, Verdict::Fail, "{clocks:?}");
    assert!(
        clocks.summary.starts_with("MySQL is +4") || clocks.summary.starts_with("MySQL is +5"),
        "{}",
        clocks.summary
    );
    assert!(clocks.fix.as_deref().unwrap().contains("NTP"));
    let lag = finding(&report, "results_lag");
    assert_eq!((lag.verdict, lag.count), (Verdict::Warn, 3), "{lag:?}");
    assert!(!report.healthy());
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_left_behind_by_a_stopped_materializer_are_found_and_counted() {
    // No instance runs the loader role, so nothing creates occurrences
    // after the API's first ones.
    let env = TestEnv::start_with(|c| {
        c.roles = vec![Role::Api, Role::Dispatcher, Role::Reconciler, Role::Results]
    })
    .await;
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "hourly", "every_ms": 3_600_000}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let healthy = doctor(&env).run_once().await;
    assert_eq!(
        finding(&healthy, "schedules").verdict,
        Verdict::Ok,
        "{healthy:?}"
    );
    // As it stands two hours on: its next occurrence is past and not a job.
    sqlx::query(
        "UPDATE schedules SET next_at = UTC_TIMESTAMP(3) - INTERVAL 5 MINUTE, \
         last_at = UTC_TIMESTAMP(3) - INTERVAL 65 MINUTE",
    )
    .execute(&env.sql)
    .await
    .unwrap();
    let report = doctor(&env).run_once().await;
    let behind = finding(&report, "schedules");
    assert_eq!(behind.verdict, Verdict::Fail, "{report:?}");
    assert_eq!(behind.ids, vec![schedule["id"].as_u64().unwrap()]);
    assert!(!report.healthy());
    let (_, stats) = env.get("/v1/stats").await;
    assert_eq!(stats["schedules"]["behind"], 1, "{stats}");
    assert_eq!(stats["schedules"]["active"], 1, "{stats}");
    env.finish().await;
}

/// A claimed row that did not decode was set aside as dead by the claim;
/// the doctor names it, and says how to repair it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_names_jobs_set_aside_as_unreadable() {
    let env = start().await;
    let id = env
        .job_create(json!({"key": "garbled", "delay_ms": 0}))
        .await["id"]
        .as_u64()
        .unwrap();
    sqlx::query("UPDATE jobs SET headers = '7' WHERE id = ?")
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    let fence = tickler_testkit::fence_all(&env.store, env.config.cluster.shards).await;
    let outcome = env
        .store
        .job_claim_many(&[id], 3, Duration::from_secs(30), &fence)
        .await
        .unwrap();
    assert_eq!(outcome.unreadable.len(), 1, "{outcome:?}");
    let report = doctor(&env).run_once().await;
    let unreadable = finding(&report, "unreadable");
    assert_eq!(
        (unreadable.verdict, unreadable.ids.clone()),
        (Verdict::Warn, vec![id]),
        "{unreadable:?}"
    );
    assert!(unreadable.fix.as_deref().unwrap().contains("redrive"));
    env.finish().await;
}

/// A trigger runs as the account that created it. With that account
/// dropped (a rotated migration user), every write to `jobs` fails with
/// ERROR 1449, and the doctor says which trigger and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_whose_definer_is_gone_is_named_by_the_doctor() {
    let env = start().await;
    let report = doctor(&env).run_once().await;
    assert!(
        finding(&report, "triggers")
            .summary
            .contains("observed by the reconciler"),
        "the suite's databases have none: {:?}",
        finding(&report, "triggers")
    );
    // The MySQL-only option: the hand-edit triggers, as `tickler migrate`
    // installs them with `mysql.history_hand_edits = trigger`.
    env.store
        .hand_edits_apply(tickler::config::HandEdits::Trigger)
        .await
        .unwrap();
    let report = doctor(&env).run_once().await;
    let triggers = finding(&report, "triggers");
    assert_eq!(triggers.verdict, Verdict::Ok, "{triggers:?}");
    assert!(
        triggers.summary.contains("jobs_hand_inserted"),
        "the hand-edit triggers are in place: {triggers:?}"
    );

    let mut conn = env.sql.acquire().await.unwrap();
    for statement in [
        "DROP TRIGGER jobs_hand_inserted".to_owned(),
        "CREATE DEFINER = 'tickler_gone'@'localhost' TRIGGER jobs_hand_inserted \
         AFTER INSERT ON jobs FOR EACH ROW SET @edited = 1"
            .to_owned(),
    ] {
        sqlx::Executor::execute(&mut *conn, statement.as_str())
            .await
            .unwrap();
    }
    drop(conn);
    let (status, refused) = env
        .post(
            "/v1/jobs",
            json!({"topic": env.topic, "payload": 1, "delay_ms": 60_000}),
        )
        .await;
    assert!(
        status >= 500,
        "a write to jobs fails while the trigger cannot run: {status} {refused}"
    );

    let report = doctor(&env).run_once().await;
    assert!(!report.healthy());
    let triggers = finding(&report, "triggers");
    assert_eq!(triggers.verdict, Verdict::Fail, "{triggers:?}");
    assert!(
        triggers.summary.contains("jobs_hand_inserted")
            && triggers.summary.contains("tickler_gone"),
        "{triggers:?}"
    );
    assert!(
        !triggers.summary.contains("jobs_hand_edited"),
        "the trigger whose definer exists is not named: {triggers:?}"
    );
    let fix = triggers.fix.as_deref().unwrap();
    assert!(fix.contains("DROP TRIGGER jobs_hand_inserted;"), "{fix}");

    // The fix as written: then writes go through again.
    sqlx::Executor::execute(&env.sql, "DROP TRIGGER jobs_hand_inserted")
        .await
        .unwrap();
    let (status, created) = env
        .post(
            "/v1/jobs",
            json!({"topic": env.topic, "payload": 1, "delay_ms": 60_000}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let triggers = finding(&doctor(&env).run_once().await, "triggers").clone();
    assert_eq!(triggers.verdict, Verdict::Ok, "{triggers:?}");
    env.finish().await;
}

/// Jobs due within a day for a topic the broker lacks are named (each would
/// be refused when due); a job dispatched minutes ago and never read back
/// on its topic (no verifier runs here) is a warning naming it; so is a
/// configured consumer group never seen committing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doctor_names_missing_topics_and_jobs_never_read_back() {
    let env = TestEnv::start_with(|c| {
        c.roles = vec![Role::Api];
        c.kafka.topic_check = tickler::config::TopicCheck::Off;
        c.topics.insert(
            "orders.audited".to_owned(),
            tickler::config::TopicConfig {
                consumer_groups: Some(vec!["nobody".to_owned()]),
                ..Default::default()
            },
        );
    })
    .await;
    let absent = format!("{}-absent", env.topic);
    for n in 0..3 {
        env.job_create(json!({"topic": absent, "payload": n, "delay_ms": 3_600_000}))
            .await;
    }
    let dispatched = env
        .job_create(json!({"payload": 1, "delay_ms": 3_600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    // Dispatched five minutes ago, as a dispatcher without a verifier
    // leaves it.
    sqlx::query(
        "UPDATE jobs SET status = 'dispatched', kafka_partition = 0, kafka_offset = 3, \
         dispatched_at = UTC_TIMESTAMP(3) - INTERVAL 5 MINUTE, \
         updated_at = UTC_TIMESTAMP(3) - INTERVAL 5 MINUTE WHERE id = ?",
    )
    .bind(dispatched)
    .execute(&env.sql)
    .await
    .unwrap();
    let report = doctor(&env).run_once().await;
    let topics = finding(&report, "topics");
    assert_eq!(topics.verdict, Verdict::Fail, "{topics:?}");
    assert_eq!(topics.count, 3, "{topics:?}");
    assert!(
        topics.summary.contains(&format!("{absent} (3)")),
        "{topics:?}"
    );
    let verification = finding(&report, "verification");
    assert_eq!(verification.verdict, Verdict::Warn, "{verification:?}");
    assert_eq!(verification.ids, vec![dispatched], "{verification:?}");
    let consumers = finding(&report, "consumers");
    assert_eq!(consumers.verdict, Verdict::Warn, "{consumers:?}");
    assert!(
        consumers.summary.contains("nobody on orders.audited"),
        "{consumers:?}"
    );
    env.finish().await;
}
