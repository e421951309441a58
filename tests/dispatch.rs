//! A job's journey: API → MySQL → Redis window → dispatcher → Kafka, against
//! the real services.

use std::time::Duration;

use serde_json::json;
use tickler::config::Role;
use tickler::index::Location;
use tickler::roles::service::Service;
use tickler_testkit::{eventually, records_read, TestEnv};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_job_arrives_on_kafka_with_its_headers_and_is_marked_dispatched() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({
            "key": "order-42",
            "payload": {"order": 42, "items": ["a", "b"]},
            "headers": {"trace-id": "abc123"},
            "delay_ms": 1000,
        }))
        .await;
    assert_eq!(job["status"], "pending");
    let id = job["id"].as_u64().unwrap();

    let records = records_read(&consumer, 1, Duration::from_secs(20)).await;
    assert_eq!(records.len(), 1, "the job reached kafka");
    let record = &records[0];
    assert_eq!(record.key.as_deref(), Some("order-42"));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&record.payload).unwrap(),
        json!({"order": 42, "items": ["a", "b"]})
    );
    assert_eq!(record.header("trace-id"), Some("abc123"));
    assert_eq!(
        record.header("tickler-job-id"),
        Some(id.to_string().as_str())
    );
    assert_eq!(record.header("tickler-attempt"), Some("1"));
    let scheduled_at_ms: i64 = record
        .header("tickler-scheduled-at")
        .unwrap()
        .parse()
        .unwrap();
    let dispatched_at_ms: i64 = record
        .header("tickler-dispatched-at")
        .unwrap()
        .parse()
        .unwrap();
    let run_at = chrono::DateTime::parse_from_rfc3339(job["run_at"].as_str().unwrap()).unwrap();
    assert_eq!(scheduled_at_ms, run_at.timestamp_millis());
    assert!(
        dispatched_at_ms >= scheduled_at_ms,
        "never early: {dispatched_at_ms} < {scheduled_at_ms}"
    );

    let shown = eventually(Duration::from_secs(10), || async {
        let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
        (job["status"] == "dispatched").then_some(job)
    })
    .await
    .expect("GET shows the job dispatched");
    assert_eq!(shown["kafka"]["partition"], record.partition);
    assert_eq!(shown["kafka"]["offset"], record.offset);
    assert!(shown["dispatched_at"].is_string());
    // The settler releases the Redis claim right after the mark commits.
    let released = eventually(Duration::from_secs(5), || async {
        (!env.redis_holds(id).await).then_some(())
    })
    .await;
    assert!(released.is_some(), "the claim was released");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_due_in_30_days_is_in_mysql_and_in_no_redis_key() {
    let env = TestEnv::start().await;
    let far = env
        .job_create(json!({"payload": "later", "delay_ms": 30u64 * 86_400_000}))
        .await;
    let near = env
        .job_create(json!({"payload": "soon", "delay_ms": 60_000}))
        .await;
    let far_id = far["id"].as_u64().unwrap();
    let near_id = near["id"].as_u64().unwrap();

    // Drive a full loader pass ourselves rather than hoping the background
    // one has run: after it, everything due within the window is indexed.
    let mut loader = env.loader();
    let now = env.store.db_now().await.unwrap();
    loader.run_once(now).await.unwrap();
    loader
        .run_once(now + chrono::Duration::seconds(5))
        .await
        .unwrap();

    assert_eq!(env.job_status(far_id).await, "pending");
    assert!(
        env.redis_holds(near_id).await,
        "the job inside the window is indexed"
    );
    assert!(
        !env.redis_holds(far_id).await,
        "the job 30 days out costs nothing in redis"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_cancelled_by_sql_is_never_produced_though_redis_still_holds_it() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let doomed = env
        .job_create(json!({"key": "doomed", "payload": 1, "delay_ms": 1500}))
        .await;
    let doomed_id = doomed["id"].as_u64().unwrap();
    assert!(
        matches!(
            env.index.job_locate(doomed_id).await.unwrap(),
            Some(Location::Due(_))
        ),
        "the job is in the redis window before the edit"
    );

    let edited =
        sqlx::query("UPDATE jobs SET status = 'cancelled' WHERE id = ? AND status = 'pending'")
            .bind(doomed_id)
            .execute(&env.sql)
            .await
            .unwrap();
    assert_eq!(edited.rows_affected(), 1);
    // A witness due after the cancelled job: once it has arrived, the
    // dispatcher has been past the cancelled job's time.
    let witness = env
        .job_create(json!({"key": "witness", "payload": 2, "delay_ms": 1600}))
        .await;

    let records = records_read(&consumer, 2, Duration::from_secs(6)).await;
    let keys: Vec<_> = records
        .iter()
        .map(|r| r.key.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        keys,
        vec!["witness".to_owned()],
        "only the witness is produced"
    );
    assert_eq!(env.job_status(doomed_id).await, "cancelled");
    assert_eq!(
        env.job_status(witness["id"].as_u64().unwrap()).await,
        "dispatched"
    );
    assert!(
        !env.redis_holds(doomed_id).await,
        "the stale entry was dropped"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_entering_the_window_later_is_loaded_and_fires_on_time() {
    // A window of 2 s: a job 3 s out is not indexed at create, the loader
    // brings it in as it enters the window, and it fires.
    let env = TestEnv::start_with(|c| {
        c.loader.window_ms = 2_000;
        c.loader.interval_ms = 200;
    })
    .await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": "x", "delay_ms": 3_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    assert!(!env.redis_holds(id).await, "outside the window at create");
    let records = records_read(&consumer, 1, Duration::from_secs(15)).await;
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].header("tickler-job-id"),
        Some(id.to_string().as_str())
    );
    let scheduled: i64 = records[0]
        .header("tickler-scheduled-at")
        .unwrap()
        .parse()
        .unwrap();
    let dispatched: i64 = records[0]
        .header("tickler-dispatched-at")
        .unwrap()
        .parse()
        .unwrap();
    assert!(dispatched >= scheduled);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_jobs_due_together_are_each_produced_once() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let mut ids = Vec::new();
    for n in 0..200 {
        let job = env.job_create(json!({"payload": n, "delay_ms": 500})).await;
        ids.push(job["id"].as_u64().unwrap().to_string());
    }
    let records = records_read(&consumer, 200, Duration::from_secs(20)).await;
    let mut seen: Vec<String> = records
        .iter()
        .map(|r| r.header("tickler-job-id").unwrap().to_owned())
        .collect();
    seen.sort();
    ids.sort();
    assert_eq!(seen, ids, "every job exactly once");
    // And nothing more trickles in.
    let extra = records_read(&consumer, 1, Duration::from_millis(500)).await;
    assert!(extra.is_empty(), "no duplicates: {extra:?}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_a_missing_topic_fails_its_attempts_alone_and_holds_up_no_other_topic() {
    // kafka.topic_check off lets the job in, as a topic deleted after create would.
    let env = TestEnv::start_with(|c| c.kafka.topic_check = tickler::config::TopicCheck::Off).await;
    let consumer = env.consumer();
    let missing = tickler_testkit::unique("tickler-missing-");
    let lost = env
        .job_create(json!({
            "topic": missing, "payload": 0, "delay_ms": 1_200,
            "max_attempts": 2, "backoff_base_ms": 200, "backoff_cap_ms": 400,
        }))
        .await;
    let lost_id = lost["id"].as_u64().unwrap();
    for n in 1..=5 {
        env.job_create(json!({"payload": n, "delay_ms": 300})).await;
    }

    let records = records_read(&consumer, 5, Duration::from_secs(20)).await;
    assert_eq!(records.len(), 5, "every healthy job arrived");
    let budget_ms = env.config.kafka.message_timeout_ms as i64 / 2;
    for record in &records {
        let at = |name: &str| -> i64 { record.header(name).unwrap().parse().unwrap() };
        let late_ms = at("tickler-dispatched-at") - at("tickler-scheduled-at");
        assert!(
            (0..budget_ms).contains(&late_ms),
            "not held for the producer's message timeout: {late_ms} ms late"
        );
    }

    let dead = eventually(Duration::from_secs(20), || async {
        let (_, job) = env.get(&format!("/v1/jobs/{lost_id}")).await;
        (job["status"] == "dead").then_some(job)
    })
    .await
    .expect("the job on the missing topic ends dead");
    assert_eq!(dead["attempt"], 2, "each refusal was an attempt");
    let error = dead["last_error"].as_str().unwrap();
    assert!(
        error.contains("attempts exhausted (2 of 2)") && error.contains("does not exist"),
        "{error}"
    );
    // Per attempt a claim and a refusal; at most one more claim and release
    // when the dispatcher first checks the topic against fresh metadata (it
    // was fetched before the job was created), and one more if the claim
    // comes back while that fetch is under way. (Due 1.2 s after its create:
    // metadata fetched before its create and a second is never trusted
    // about its topic.)
    assert!(
        dead["version"].as_u64().unwrap() <= 11,
        "no churn of the row: {dead}"
    );
    let (_, history) = env.get(&format!("/v1/jobs/{lost_id}/history")).await;
    let events = history["events"].as_array().unwrap();
    let step = |e: &serde_json::Value| {
        (
            e["actor"].as_str().unwrap().to_owned(),
            e["status"].as_str().unwrap().to_owned(),
            e["attempt"].as_u64().unwrap(),
        )
    };
    assert_eq!(
        step(&events[0]),
        ("api:test-admin".to_owned(), "pending".to_owned(), 1)
    );
    assert_eq!(
        step(events.last().unwrap()),
        ("dispatcher".to_owned(), "dead".to_owned(), 2)
    );
    assert!(
        events[1..].iter().all(|e| e["actor"] == "dispatcher"),
        "the dispatcher alone decided: {history}"
    );
    // The settler removes the entry right after the refusal commits.
    let left = eventually(Duration::from_secs(5), || async {
        (!env.redis_holds(lost_id).await).then_some(())
    })
    .await;
    assert!(left.is_some(), "a dead job leaves redis");
    let (_, metrics) = env.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tickler_produce_refused_total")
                && l.contains(&missing)
                && l.contains("unknown_topic")),
        "the refusal is counted by topic"
    );
    env.finish().await;
}

/// A topic created a moment before its jobs costs them no attempt: the
/// metadata (fetched by the create before, not again for a minute) says
/// the topic is missing, but it was fetched before the job was created, so
/// the job waits for metadata fetched after rather than being refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_just_before_its_job_costs_it_no_attempt() {
    let env = TestEnv::start_with(|c| {
        c.kafka.topic_check = tickler::config::TopicCheck::Warn;
        c.kafka.topic_refresh_ms = 60_000;
    })
    .await;
    // A create checks its topic: the metadata is fetched now.
    env.job_create(json!({"payload": 0, "delay_ms": 3_600_000}))
        .await;
    let topic = tickler_testkit::unique("tickler-new-");
    tickler::kafka::topic_ensure(&env.config.kafka.brokers, &topic, 1)
        .await
        .unwrap();
    let job = env
        .job_create(json!({"topic": topic, "payload": 1, "delay_ms": 0}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let sent = eventually(Duration::from_secs(20), || async {
        let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
        (job["status"] == "dispatched").then_some(job)
    })
    .await
    .expect("the job goes out");
    assert_eq!(sent["attempt"], 1, "no attempt refused: {sent}");
    assert!(
        !sent["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("does not exist"),
        "never refused: {sent}"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dispatcher_pass_reports_what_became_of_each_claimed_id() {
    use std::sync::Arc;
    use tickler::kafka::Topics;
    use tickler::roles::dispatcher::{Dispatcher, DispatcherConfig};
    use tickler::roles::membership::{Membership, MembershipConfig};
    use tickler::roles::resolver::Resolver;

    // The API alone: the pass below is the only dispatcher.
    let env = TestEnv::start_with(|c| {
        c.roles = vec![Role::Api];
        c.kafka.topic_check = tickler::config::TopicCheck::Off;
    })
    .await;
    let consumer = env.consumer();
    let id = |job: serde_json::Value| job["id"].as_u64().unwrap();
    let produced = id(env.job_create(json!({"payload": 1, "delay_ms": 0})).await);
    let refused = id(env
        .job_create(json!({"topic": tickler_testkit::unique("tickler-missing-"), "payload": 2, "delay_ms": 0}))
        .await);
    let later = id(env
        .job_create(json!({"payload": 3, "delay_ms": 60_000}))
        .await);
    let cancelled = id(env.job_create(json!({"payload": 4, "delay_ms": 0})).await);
    // Redis suggests the later job now (as a stale entry would), and still
    // holds the job cancelled by hand.
    env.index
        .job_add_many(&[(later, chrono::Utc::now() - chrono::Duration::seconds(1))])
        .await
        .unwrap();
    sqlx::query("UPDATE jobs SET status = 'cancelled' WHERE id = ?")
        .bind(cancelled)
        .execute(&env.sql)
        .await
        .unwrap();

    let config = Arc::new(env.config.clone());
    let wake = Arc::new(tokio::sync::Notify::new());
    let topics = Topics::new(
        &config.kafka.brokers,
        &config.kafka.options,
        Duration::from_millis(config.kafka.topic_refresh_ms),
    );
    // Fetched a second after the jobs' creates: metadata that can speak
    // of their topics (a topic made a moment before its jobs may not be
    // listed yet).
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    topics.refresh_if_older(Duration::ZERO).await;
    let resolver = Resolver::new(
        env.store.clone(),
        env.index.clone(),
        &config,
        wake.clone(),
        Arc::new(tokio::sync::Notify::new()),
    );
    // This pass's instance joins and takes every shard, as a tickler with
    // the dispatcher role does.
    let membership = Membership::new(
        env.store.clone(),
        env.index.clone(),
        MembershipConfig {
            dispatcher: true,
            ..MembershipConfig::from_config(&config)
        },
        wake.clone(),
    );
    let mut ownership = membership.subscribe();
    let holding = membership.holding();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(membership.run(stop.clone(), stop.clone()));
    ownership
        .wait_for(|o| o.shards.len() == config.cluster.shards as usize)
        .await
        .unwrap();
    let dispatcher = Dispatcher::new(
        env.store.clone(),
        env.index.clone(),
        DispatcherConfig::from_config(&config),
        wake,
        topics,
        resolver,
        holding,
        tickler::roles::topic_controls::TopicControls::new(env.store.clone(), &config),
    )
    .unwrap();
    let report = dispatcher.run_once().await;
    assert_eq!(
        (
            report.claimed,
            report.dispatched,
            report.refused,
            report.not_due,
            report.stale,
            report.failed
        ),
        (4, 1, 1, 1, 1, 0),
        "{report:?}"
    );
    assert_eq!(env.job_status(produced).await, "dispatched");
    assert_eq!(
        env.job_status(refused).await,
        "pending",
        "a failed attempt, retried later"
    );
    assert_eq!(env.job_status(later).await, "pending");
    assert_eq!(env.job_status(cancelled).await, "cancelled");
    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(
        records[0].header("tickler-job-id"),
        Some(produced.to_string().as_str())
    );
    assert!(!env.redis_holds(cancelled).await, "the stale entry is gone");
    stop.cancel();
    env.finish().await;
}

/// The dispatcher claims a job due within `dispatcher.lookahead_ms` ahead of
/// its time and holds it: in that stretch the row is `dispatching` (a cancel
/// answers `in_flight`, so nothing answered `applied` is ever produced), and
/// the record still leaves no sooner than the database's clock says the job
/// is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_claimed_ahead_is_held_until_its_time_and_no_longer_cancellable() {
    // A long lookahead, so the stretch is wide enough to look at.
    let env = TestEnv::start_with(|c| c.dispatcher.lookahead_ms = 1_000).await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": "held", "delay_ms": 2_500}))
        .await;
    let id = job["id"].as_u64().unwrap();

    // Claimed while its time is still ahead by the database's clock.
    let claimed_ahead = eventually(Duration::from_secs(10), || async {
        let (status, ahead): (String, i64) = sqlx::query_as(
            "SELECT CAST(status AS CHAR), schedule_time > UTC_TIMESTAMP(3) FROM jobs WHERE id = ?",
        )
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap();
        match status.as_str() {
            "pending" => None,
            _ => Some((status, ahead)),
        }
    })
    .await
    .expect("the job was claimed");
    assert_eq!(
        claimed_ahead,
        ("dispatching".to_owned(), 1),
        "claimed before its time"
    );
    let (status, answer) = env.request("DELETE", &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "in_flight", "{answer}");

    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(records.len(), 1);
    let header = |name| -> i64 { records[0].header(name).unwrap().parse().unwrap() };
    assert!(
        header("tickler-dispatched-at") >= header("tickler-scheduled-at"),
        "never early"
    );
    let early: i64 = eventually(Duration::from_secs(10), || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT dispatched_at < schedule_time FROM jobs WHERE id = ? AND status = 'dispatched'",
        )
        .bind(id)
        .fetch_optional(&env.sql)
        .await
        .unwrap()
    })
    .await
    .expect("marked dispatched");
    assert_eq!(early, 0, "dispatched_at is not before schedule_time");
    env.finish().await;
}
