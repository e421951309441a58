//! Cancel means never, under every fault: claims whose outcome tickler does
//! not know are "in doubt" — still `dispatching`, so a cancel answers
//! `in_flight` and a PATCH is refused — until the reconciler has read their
//! topic back; and an instance sends nothing it may no longer send. Each
//! test plays one path exactly (rows, records and heartbeats as the fault
//! leaves them), against the real MariaDB, Redis and broker.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde_json::{json, Value};
use tickler::config::Config;
use tickler::config::Role;
use tickler::kafka::{TopicState, Topics};
use tickler::roles::dispatcher::{Dispatcher, DispatcherConfig};
use tickler::roles::membership::{Membership, MembershipConfig};
use tickler::roles::reconciler::{ReconcileReport, Reconciler, ReconcilerConfig};
use tickler::roles::resolver::Resolver;
use tickler::roles::service::Service;
use tickler::roles::topic_controls::TopicControls;
use tickler::store::Fence;
use tickler_testkit::{eventually, fence_all, records_read, TestEnv};
use tokio::sync::Notify;

/// The API alone: the test drives every other role.
async fn api_only(adjust: impl FnOnce(&mut Config)) -> TestEnv {
    TestEnv::start_with(|c| {
        c.roles = vec![Role::Api];
        adjust(c);
    })
    .await
}

async fn cancel(env: &TestEnv, id: u64) -> (u16, Value) {
    env.request("DELETE", &format!("/v1/jobs/{id}"), None).await
}

async fn outcome_of_cancel(env: &TestEnv, id: u64) -> (u16, String) {
    let (status, reply) = cancel(env, id).await;
    (
        status,
        reply["outcome"].as_str().unwrap_or_default().to_owned(),
    )
}

fn resolver(env: &TestEnv) -> Resolver {
    Resolver::new(
        env.store.clone(),
        env.index.clone(),
        &env.config,
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
    )
}

async fn reconcile(env: &TestEnv) -> ReconcileReport {
    let mut reconciler = Reconciler::new(
        env.store.clone(),
        env.index.clone(),
        ReconcilerConfig::from_config(&env.config),
        Arc::new(Notify::new()),
        resolver(env),
    );
    let now = env.store.db_now().await.unwrap();
    reconciler.run_once(now).await.unwrap()
}

/// Produces the record a tickler instance would have produced for (`id`,
/// `attempt`), as a dispatcher that handed it to the broker and then died
/// or paused; returns its (partition, offset).
async fn record_as_a_dispatcher_sent_it(env: &TestEnv, id: u64, attempt: u32) -> (i32, i64) {
    let now_ms = chrono::Utc::now().timestamp_millis().to_string();
    let (id, attempt) = (id.to_string(), attempt.to_string());
    let mut headers = OwnedHeaders::new();
    for (key, value) in [
        ("tickler-job-id", &id),
        ("tickler-attempt", &attempt),
        ("tickler-scheduled-at", &now_ms),
        ("tickler-dispatched-at", &now_ms),
    ] {
        headers = headers.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    produce(env, &id, "zombie", headers).await
}

/// Produces a record onto the test's topic; returns its (partition, offset).
async fn produce(env: &TestEnv, key: &str, payload: &str, headers: OwnedHeaders) -> (i32, i64) {
    let producer = tickler_testkit::producer(
        &env.config.kafka.brokers,
        &env.config.kafka.options,
        1,
        10_000,
    )
    .unwrap();
    let delivered = producer
        .send(
            FutureRecord::to(&env.topic)
                .key(key)
                .payload(payload)
                .headers(headers),
            Duration::from_secs(10),
        )
        .await
        .map_err(|(err, _)| err)
        .unwrap();
    (delivered.partition, delivered.offset)
}

/// Instance `fence.instance` claims `id` under `token`, as a dispatcher's
/// compare-and-set does.
async fn claim(env: &TestEnv, id: u64, token: u64, lease: Duration, fence: &Fence) {
    let outcome = env
        .store
        .job_claim_many(&[id], token, lease, fence)
        .await
        .unwrap();
    assert_eq!(outcome.won.len(), 1, "{outcome:?}");
}

/// The instance's heartbeat goes silent long past any TTL.
async fn instance_dies(env: &TestEnv, fence: &Fence) {
    sqlx::query(
        "UPDATE instances SET heartbeat_at = TIMESTAMPADD(HOUR, -1, UTC_TIMESTAMP(3)) WHERE id = ?",
    )
    .bind(fence.instance)
    .execute(&env.sql)
    .await
    .unwrap();
}

async fn last_error(env: &TestEnv, id: u64) -> String {
    let bytes =
        sqlx::query_scalar::<_, Option<Vec<u8>>>("SELECT last_error FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&env.sql)
            .await
            .unwrap()
            .unwrap_or_default();
    String::from_utf8(bytes).unwrap()
}

/// Path 1: an instance hands a record to the broker and dies (or pauses)
/// before marking it. The others must not let a cancel answer `cancelled`:
/// the claim is in doubt (cancel: `in_flight`) until the topic is read
/// back, which finds the record — the job is `dispatched` there, and a
/// cancel now answers `too_late` with that position. Nothing is produced a
/// second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_a_dead_instance_handed_to_the_broker_is_found_and_no_cancel_says_cancelled() {
    let env = api_only(|_| {}).await;
    let consumer = env.consumer();
    let id = env.job_create(json!({"payload": 1, "delay_ms": 0})).await["id"]
        .as_u64()
        .unwrap();
    let zombie = fence_all(&env.store, env.config.cluster.shards).await;
    claim(&env, id, 77, Duration::from_secs(30), &zombie).await;
    // Another producer's record on the topic, with a header name that is
    // not UTF-8: reading past it must not stop the read-back (rdkafka's
    // own header reading panics on it).
    foreign_record_with_a_binary_header_name(&env).await;
    let (partition, offset) = record_as_a_dispatcher_sent_it(&env, id, 1).await;
    instance_dies(&env, &zombie).await;

    let doubted = env
        .store
        .job_rescue_dead(env.config.instance_ttl(), Duration::from_millis(200), 100)
        .await
        .unwrap();
    assert_eq!(doubted, 1);
    assert_eq!(
        outcome_of_cancel(&env, id).await,
        (409, "in_flight".to_owned())
    );
    let (status, _) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{id}"),
            Some(json!({"version": 2, "delay_ms": 60_000}).to_string()),
        )
        .await;
    assert_eq!(status, 409, "a PATCH is refused too");
    assert_eq!(
        reconcile(&env).await.found,
        0,
        "not read back before its quiet time"
    );

    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = reconcile(&env).await;
    assert_eq!((report.found, report.rescued), (1, 0), "{report:?}");
    assert_eq!(env.job_status(id).await, "dispatched");
    let (status, reply) = cancel(&env, id).await;
    assert_eq!((status, reply["outcome"].as_str()), (409, Some("too_late")));
    assert_eq!(reply["kafka"]["partition"], partition);
    assert_eq!(reply["kafka"]["offset"], offset);
    let records = records_read(&consumer, 3, Duration::from_secs(3)).await;
    let ours = id.to_string();
    assert_eq!(
        records
            .iter()
            .filter(|r| r.header("tickler-job-id") == Some(ours.as_str()))
            .count(),
        1,
        "produced once, by the dead instance"
    );
    env.finish().await;
}

async fn foreign_record_with_a_binary_header_name(env: &TestEnv) {
    let headers = tickler_testkit::header_raw_add(OwnedHeaders::new(), b"h\xff\xfe", b"v");
    produce(env, "someone-else", "not tickler's", headers).await;
}

/// Path 1, the other way: the dead instance's record never reached the
/// broker. Read back and not found, the job is pending again — and now a
/// cancel answers `cancelled`, and means it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_instances_claim_not_on_the_broker_is_pending_again_after_the_read_back() {
    let env = api_only(|_| {}).await;
    let consumer = env.consumer();
    let id = env.job_create(json!({"payload": 1, "delay_ms": 0})).await["id"]
        .as_u64()
        .unwrap();
    let zombie = fence_all(&env.store, env.config.cluster.shards).await;
    claim(&env, id, 78, Duration::from_secs(30), &zombie).await;
    instance_dies(&env, &zombie).await;
    env.store
        .job_rescue_dead(env.config.instance_ttl(), Duration::ZERO, 100)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let report = reconcile(&env).await;
    assert_eq!((report.found, report.rescued), (0, 1), "{report:?}");
    assert_eq!(env.job_status(id).await, "pending");
    assert!(last_error(&env, id).await.contains("which died"));
    assert!(env.redis_holds(id).await, "indexed again, to be produced");
    assert_eq!(
        outcome_of_cancel(&env, id).await,
        (200, "cancelled".to_owned())
    );
    assert!(records_read(&consumer, 1, Duration::from_secs(2))
        .await
        .is_empty());
    env.finish().await;
}

/// Path 4: settling can starve. 1,100 rows set back to `dispatching` by
/// hand (no claim token, no lease: oldest of all) whose records are on
/// their topic, and one real doubt on another topic, due last. Every pass
/// takes its topics oldest first, a few at a time with a share each, so
/// the other topic is read at once; and the hand-set rows found on their
/// topic are marked `dispatched` there rather than read again forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doubts_settle_across_topics_and_rows_set_dispatching_by_hand_are_resolved() {
    // The second topic is made after tickler started (its metadata cache
    // does not know it yet).
    let env = api_only(|c| c.kafka.topic_check = tickler::config::TopicCheck::Off).await;
    // The hand-set rows, each with its record on the topic.
    let n = 1_100u64;
    let ids = rows_set_dispatching_by_hand(&env, n, Duration::from_secs(10)).await;
    let producer = tickler_testkit::producer(
        &env.config.kafka.brokers,
        &env.config.kafka.options,
        5,
        10_000,
    )
    .unwrap();
    let now_ms = chrono::Utc::now().timestamp_millis().to_string();
    let sends = ids.iter().map(|id| {
        let id = id.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "tickler-job-id",
                value: Some(id.as_bytes()),
            })
            .insert(Header {
                key: "tickler-attempt",
                value: Some("1"),
            })
            .insert(Header {
                key: "tickler-dispatched-at",
                value: Some(now_ms.as_bytes()),
            });
        let producer = producer.clone();
        let topic = env.topic.clone();
        async move {
            producer
                .send(
                    FutureRecord::to(&topic)
                        .key(&id)
                        .payload("by hand")
                        .headers(headers),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(err, _)| err)
                .unwrap();
        }
    });
    futures::future::join_all(sends).await;

    // The real doubt, on another topic: a dead instance's claim, never sent.
    let other = tickler_testkit::unique("tickler-test-");
    tickler::kafka::topic_ensure(&env.config.kafka.brokers, &other, 1)
        .await
        .unwrap();
    let id = env
        .job_create(json!({"topic": other, "payload": 1, "delay_ms": 0}))
        .await["id"]
        .as_u64()
        .unwrap();
    let zombie = fence_all(&env.store, env.config.cluster.shards).await;
    claim(&env, id, 81, Duration::from_secs(30), &zombie).await;
    instance_dies(&env, &zombie).await;
    env.store
        .job_rescue_dead(env.config.instance_ttl(), Duration::ZERO, 100)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;

    let first = reconcile(&env).await;
    assert_eq!(
        env.job_status(id).await,
        "pending",
        "the other topic's doubt is read in the first pass: {first:?}"
    );
    let second = reconcile(&env).await;
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'dispatching'")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(
        left, 0,
        "every hand-set row is settled: {first:?} {second:?}"
    );
    let dispatched: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM jobs WHERE topic = ? AND status = 'dispatched' \
         AND kafka_offset IS NOT NULL",
    )
    .bind(&env.topic)
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!(dispatched as u64, n, "found on the topic: dispatched there");
    env.finish().await;
}

/// Path 3: the record is on the topic but the mark was lost (the database
/// was unreachable for longer than the settler retries); the claim lease
/// expires. Reading back finds the record: `dispatched` at its position,
/// not produced again, and a cancel says `too_late`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_mark_is_found_by_reading_the_topic_back() {
    let env = api_only(|_| {}).await;
    let consumer = env.consumer();
    let id = env.job_create(json!({"payload": 1, "delay_ms": 0})).await["id"]
        .as_u64()
        .unwrap();
    let live = fence_all(&env.store, env.config.cluster.shards).await;
    claim(&env, id, 79, Duration::from_millis(500), &live).await;
    let (_, offset) = record_as_a_dispatcher_sent_it(&env, id, 1).await;
    assert_eq!(
        outcome_of_cancel(&env, id).await,
        (409, "in_flight".to_owned())
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = reconcile(&env).await;
    assert_eq!((report.found, report.rescued), (1, 0), "{report:?}");
    let (status, reply) = cancel(&env, id).await;
    assert_eq!((status, reply["outcome"].as_str()), (409, Some("too_late")));
    assert_eq!(reply["kafka"]["offset"], offset);
    assert_eq!(
        records_read(&consumer, 2, Duration::from_secs(3))
            .await
            .len(),
        1
    );
    env.finish().await;
}

/// A dispatcher for `env`'s deployment, whose membership the test drives:
/// it joins and runs one round (taking every shard), then beats no more.
async fn dispatcher_with(
    env: &TestEnv,
    config: &Config,
) -> (Dispatcher, TopicControls, Membership) {
    let topics = Topics::new(
        &config.kafka.brokers,
        &config.kafka.options,
        Duration::from_millis(config.kafka.topic_refresh_ms),
    );
    dispatcher_with_topics(env, config, topics).await
}

/// [`dispatcher_with`], its metadata from `topics`.
async fn dispatcher_with_topics(
    env: &TestEnv,
    config: &Config,
    topics: Topics,
) -> (Dispatcher, TopicControls, Membership) {
    let config = Arc::new(config.clone());
    let wake = Arc::new(Notify::new());
    let membership = Membership::new(
        env.store.clone(),
        env.index.clone(),
        MembershipConfig {
            dispatcher: true,
            ..MembershipConfig::from_config(&config)
        },
        wake.clone(),
    );
    let id = membership.join().await.unwrap();
    membership.run_once(id, false).await.unwrap();
    let controls = TopicControls::new(env.store.clone(), &config);
    controls.refresh().await.unwrap();
    let dispatcher = Dispatcher::new(
        env.store.clone(),
        env.index.clone(),
        DispatcherConfig::from_config(&config),
        wake,
        topics,
        resolver(env),
        membership.holding(),
        controls.clone(),
    )
    .unwrap();
    (dispatcher, controls, membership)
}

/// Accepts connections and never answers: a broker that takes what is sent
/// and says nothing (its fate unknown to the producer).
async fn silent_broker() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (addr, task)
}

/// Path 2: a send the producer gives up on (`MessageTimedOut`) may have
/// been persisted. The job is not released for another try — where a cancel
/// would then answer `cancelled` — but put in doubt, and read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_send_is_in_doubt_until_the_topic_is_read_back() {
    let env = api_only(|c| c.kafka.topic_check = tickler::config::TopicCheck::Off).await;
    let id = env.job_create(json!({"payload": 1, "delay_ms": 0})).await["id"]
        .as_u64()
        .unwrap();
    let (silent, listener) = silent_broker().await;
    let mut config = env.config.clone();
    config.kafka.brokers = silent;
    config.kafka.message_timeout_ms = 1_000;
    let (dispatcher, _, _membership) = dispatcher_with(&env, &config).await;
    let report = dispatcher.run_once().await;
    assert_eq!((report.claimed, report.failed), (1, 1), "{report:?}");
    assert_eq!(env.job_status(id).await, "dispatching", "in doubt");
    assert!(last_error(&env, id).await.contains("not acknowledged"));
    assert_eq!(
        outcome_of_cancel(&env, id).await,
        (409, "in_flight".to_owned())
    );
    listener.abort();

    // Read back on the real broker once the margin has passed: not there.
    let settled = eventually(Duration::from_secs(10), || async {
        let report = reconcile(&env).await;
        (report.rescued == 1).then_some(())
    })
    .await;
    assert!(settled.is_some(), "read back and settled");
    assert_eq!(env.job_status(id).await, "pending");
    assert_eq!(
        outcome_of_cancel(&env, id).await,
        (200, "cancelled".to_owned())
    );
    env.finish().await;
}

/// Path 5: a send that timed out is in doubt even when, by the time it
/// timed out, the metadata says its topic is missing. The record may be on
/// the broker all the same (the metadata late, the topic made again
/// meanwhile), so counting the timeout a refusal would send the next
/// attempt beside it. Here the topic is deleted and the metadata fetched
/// again while the send hangs on a broker that never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_send_stays_in_doubt_when_its_topic_left_the_metadata_meanwhile() {
    let env = api_only(|c| c.kafka.topic_check = tickler::config::TopicCheck::Off).await;
    let brokers = env.config.kafka.brokers.clone();
    let topic = format!("{}-vanishing", env.topic);
    tickler::kafka::topic_ensure(&brokers, &topic, 1)
        .await
        .unwrap();
    let id = env
        .job_create(json!({"payload": 1, "delay_ms": 0, "topic": topic}))
        .await["id"]
        .as_u64()
        .unwrap();
    // The metadata comes from the real broker, which has the topic; the
    // records go to one that takes them and never answers.
    let topics = Topics::new(&brokers, &env.config.kafka.options, Duration::from_secs(60));
    assert_eq!(topics.check(&topic).await, TopicState::Exists);
    let (silent, listener) = silent_broker().await;
    let mut config = env.config.clone();
    config.kafka.brokers = silent;
    config.kafka.message_timeout_ms = 3_000;
    let (dispatcher, _, _membership) = dispatcher_with_topics(&env, &config, topics.clone()).await;
    let vanish = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        topic_delete(&brokers, &topic).await;
        let gone = eventually(Duration::from_secs(2), || async {
            topics.refresh_if_older(Duration::ZERO).await;
            (topics.state(&topic) == TopicState::Missing).then_some(())
        })
        .await;
        assert!(gone.is_some(), "the metadata says the topic is missing");
    });
    let report = dispatcher.run_once().await;
    vanish.await.unwrap();
    assert_eq!((report.claimed, report.failed), (1, 1), "{report:?}");
    assert_eq!(
        env.job_status(id).await,
        "dispatching",
        "in doubt, not refused"
    );
    assert!(last_error(&env, id).await.contains("not acknowledged"));
    assert_eq!(
        outcome_of_cancel(&env, id).await,
        (409, "in_flight".to_owned())
    );
    listener.abort();
    env.finish().await;
}

async fn topic_delete(brokers: &str, topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let results = admin
        .delete_topics(&[topic], &AdminOptions::new())
        .await
        .unwrap();
    for result in results {
        result.unwrap();
    }
}

/// A paused (or partitioned) instance that wakes with jobs in hand sends
/// none of them once its heartbeat is older than it may trust: the others
/// may have declared it dead and settled its claims meanwhile. The jobs go
/// back to pending, unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_heartbeat_ran_out_sends_nothing_it_holds() {
    let env = api_only(|c| {
        c.cluster.instance_ttl_ms = 800;
        c.dispatcher.lookahead_ms = 1_000;
    })
    .await;
    let consumer = env.consumer();
    let (dispatcher, _, _membership) = dispatcher_with(&env, &env.config).await;
    // Claimed ahead at once, held until its time: past the moment this
    // instance stops trusting its heartbeat (600 ms after it beat).
    let id = env.job_create(json!({"payload": 1, "delay_ms": 900})).await["id"]
        .as_u64()
        .unwrap();
    let report = dispatcher.run_once().await;
    assert_eq!((report.claimed, report.failed), (1, 1), "{report:?}");
    assert_eq!(env.job_status(id).await, "pending", "withheld, unsent");
    assert!(last_error(&env, id).await.contains("heartbeat"));
    assert!(records_read(&consumer, 1, Duration::from_secs(2))
        .await
        .is_empty());
    env.finish().await;
}

/// A dead instance comes back to life: paused past its TTL with a claim in
/// hand, it was taken for dead, its claim put in doubt, read back (not
/// there), returned to pending and cancelled — answered `cancelled`. When
/// it beats again it is alive, but a new incarnation: the claim it made
/// before the lapse is never sent, however much of its send window is
/// left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_revived_after_its_ttl_sends_nothing_it_claimed_before() {
    let env = api_only(|c| {
        c.cluster.instance_ttl_ms = 1_000;
        c.dispatcher.lookahead_ms = 12_000;
        c.kafka.message_timeout_ms = 1_000;
        c.kafka.doubt_margin_ms = 500;
        c.dispatcher.claim_lease_ms = 20_000;
    })
    .await;
    let consumer = env.consumer();
    let (dispatcher, controls, membership) = dispatcher_with(&env, &env.config).await;
    let instance = membership.subscribe().borrow().instance.unwrap();
    // Claimed ahead at once, held until its time, well inside the claim's
    // send window (20 s less the timeout and the margin). The lookahead
    // (12 s, past the 1 s a configuration may set) is the fixture that
    // holds a won claim across the lapse, as a paused process's frozen
    // pass would, without pausing this test's own process.
    let id = env
        .job_create(json!({"payload": 1, "delay_ms": 8_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    let pass = tokio::spawn(async move { dispatcher.run_once().await });
    let held = eventually(Duration::from_secs(5), || async {
        (env.job_status(id).await == "dispatching").then_some(())
    })
    .await;
    assert!(held.is_some(), "claimed ahead");

    // The heartbeat lapses (a pause): the others put the claim in doubt,
    // read the topic back, find nothing, and the job is pending again.
    sqlx::query(
        "UPDATE instances SET heartbeat_at = TIMESTAMPADD(SECOND, -5, UTC_TIMESTAMP(3)) WHERE id = ?",
    )
    .bind(instance)
    .execute(&env.sql)
    .await
    .unwrap();
    let in_doubt = env
        .store
        .job_rescue_dead(env.config.instance_ttl(), Duration::from_millis(1_500), 100)
        .await
        .unwrap();
    assert_eq!(in_doubt, 1);
    let settled = eventually(Duration::from_secs(10), || async {
        (reconcile(&env).await.rescued == 1).then_some(())
    })
    .await;
    assert!(settled.is_some(), "read back and settled");
    assert_eq!(
        outcome_of_cancel(&env, id).await,
        (200, "cancelled".to_owned())
    );

    // It wakes and beats again, and keeps beating: alive for everyone.
    // (Its topic controls are read on, as its own loop reads them.)
    let revived = membership.run_once(instance, false).await.unwrap();
    assert!(revived.live >= 1);
    let beating = tokio::spawn(async move {
        loop {
            let _ = membership.run_once(instance, false).await;
            let _ = controls.refresh().await;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    });
    let report = pass.await.unwrap();
    beating.abort();
    assert_eq!(
        (report.claimed, report.failed),
        (1, 1),
        "withheld: {report:?}"
    );
    assert!(
        records_read(&consumer, 1, Duration::from_secs(2))
            .await
            .is_empty(),
        "a cancel answered `cancelled` is never produced"
    );
    assert_eq!(env.job_status(id).await, "cancelled");
    env.finish().await;
}

/// A job claimed before its topic was paused, and held until its time, is
/// not sent once the pause is known: nothing of a paused topic leaves after
/// the pause has answered, however long a job was held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_held_when_its_topic_is_paused_is_not_sent() {
    let env = api_only(|c| c.dispatcher.lookahead_ms = 1_000).await;
    let consumer = env.consumer();
    let (dispatcher, controls, _membership) = dispatcher_with(&env, &env.config).await;
    let id = env.job_create(json!({"payload": 1, "delay_ms": 900})).await["id"]
        .as_u64()
        .unwrap();
    let pass = tokio::spawn(async move { dispatcher.run_once().await });
    let held = eventually(Duration::from_secs(5), || async {
        (env.job_status(id).await == "dispatching").then_some(())
    })
    .await;
    assert!(held.is_some(), "claimed ahead");
    sqlx::query("INSERT INTO topic_controls (topic, paused) VALUES (?, TRUE)")
        .bind(&env.topic)
        .execute(&env.sql)
        .await
        .unwrap();
    controls.refresh().await.unwrap();
    let report = pass.await.unwrap();
    assert_eq!((report.claimed, report.failed), (1, 1), "{report:?}");
    assert_eq!(env.job_status(id).await, "pending");
    assert!(records_read(&consumer, 1, Duration::from_secs(2))
        .await
        .is_empty());
    env.finish().await;
}

/// Path 4: on SIGTERM an instance keeps beating while its dispatcher
/// drains, however long the drain (a slow broker during a deploy): it is
/// never taken for dead — its claims put in doubt, its sends refused —
/// while it is still recording them. It leaves once the drain is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_instance_keeps_beating_until_its_dispatcher_is_done() {
    let env = api_only(|c| c.cluster.instance_ttl_ms = 600).await;
    let membership = Membership::new(
        env.store.clone(),
        env.index.clone(),
        MembershipConfig {
            dispatcher: true,
            ..MembershipConfig::from_config(&env.config)
        },
        Arc::new(Notify::new()),
    );
    let mut ownership = membership.subscribe();
    let stop = tokio_util::sync::CancellationToken::new();
    let drained = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(membership.run(stop.clone(), drained.clone()));
    let id = ownership
        .wait_for(|o| !o.shards.is_empty())
        .await
        .unwrap()
        .instance
        .unwrap();
    stop.cancel();
    // Three TTLs into the drain.
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    let alive: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM instances WHERE id = ? \
         AND heartbeat_at >= TIMESTAMPADD(MICROSECOND, -600000, UTC_TIMESTAMP(3))",
    )
    .bind(id)
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!(alive, 1, "still alive for the others while draining");
    drained.cancel();
    running.await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE id = ?")
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(left, 0, "left once drained");
    env.finish().await;
}

/// A topic too long to read in one pass's share: each pass goes on from
/// where the last one stopped, so the claim in doubt behind 20,000 records
/// is found in the end. Read over from its start each pass, as before, it
/// never would be: the control below gives five passes a fresh start each,
/// and the claim is still in doubt after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_read_back_goes_on_where_the_last_pass_stopped() {
    let env = api_only(|c| c.kafka.topic_check = tickler::config::TopicCheck::Off).await;
    // The row in doubt: set dispatching by hand, its record last on the
    // topic, behind everything else.
    let id = rows_set_dispatching_by_hand(&env, 1, Duration::from_secs(1)).await[0];
    let producer = tickler_testkit::producer(
        &env.config.kafka.brokers,
        &env.config.kafka.options,
        5,
        10_000,
    )
    .unwrap();
    let filler = (0..20_000).map(|i| {
        let producer = producer.clone();
        let topic = env.topic.clone();
        async move {
            let key = format!("filler-{i}");
            producer
                .send(
                    FutureRecord::to(&topic).key(&key).payload("not a job"),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(err, _)| err)
                .unwrap();
        }
    });
    futures::future::join_all(filler).await;
    record_as_a_dispatcher_sent_it(&env, id, 1).await;

    // Started over each pass: never to the end.
    for _ in 0..5 {
        let fresh = std::sync::Mutex::new(tickler::kafka::readback::Resume::default());
        let settled = settle_reading_for(&env, &fresh, Duration::from_millis(5)).await;
        assert_eq!(settled.produced + settled.absent, 0, "{settled:?}");
    }
    assert_eq!(env.job_status(id).await, "dispatching");
    // Going on each pass: found.
    let resume = std::sync::Mutex::new(tickler::kafka::readback::Resume::default());
    let mut passes = 0;
    while env.job_status(id).await == "dispatching" && passes < 200 {
        let settled = settle_reading_for(&env, &resume, Duration::from_millis(5)).await;
        passes += 1;
        assert_eq!(settled.absent, 0, "nothing concluded absent: {settled:?}");
    }
    println!("read back across {passes} passes");
    assert_eq!(
        env.job_status(id).await,
        "dispatched",
        "found behind the filler"
    );
    let position: (Option<i32>, Option<i64>) =
        sqlx::query_as("SELECT kafka_partition, kafka_offset FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&env.sql)
            .await
            .unwrap();
    assert!(position.1.is_some(), "marked where it landed: {position:?}");
    env.finish().await;
}

/// One pass of settling claims in doubt, each topic read for `wait` at
/// most, going on from `resume`.
async fn settle_reading_for(
    env: &TestEnv,
    resume: &std::sync::Mutex<tickler::kafka::readback::Resume>,
    wait: Duration,
) -> tickler::roles::reconciler::DoubtsSettled {
    tickler::roles::reconciler::doubts_settle(
        &env.store,
        &env.index,
        &tickler::roles::reconciler::ReadBack {
            brokers: &env.config.kafka.brokers,
            options: &env.config.kafka.options,
            wait,
            resume,
        },
        1_000,
        &std::collections::HashSet::new(),
    )
    .await
    .unwrap()
}

/// `n` jobs on the test's topic, due 30 s ago spread over `spread`, set
/// back to `dispatching` by hand as an operator would (no claim token, no
/// owner, no lease); their ids.
async fn rows_set_dispatching_by_hand(env: &TestEnv, n: u64, spread: Duration) -> Vec<u64> {
    env.store
        .job_seed(
            &env.topic,
            n,
            chrono::Utc::now() - chrono::Duration::seconds(30),
            spread,
        )
        .await
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET status = 'dispatching', attempt = 1, claim_token = NULL, \
         claimed_by = NULL, claim_expires_at = NULL WHERE topic = ?",
    )
    .bind(&env.topic)
    .execute(&env.sql)
    .await
    .unwrap();
    sqlx::query_scalar("SELECT id FROM jobs WHERE topic = ?")
        .bind(&env.topic)
        .fetch_all(&env.sql)
        .await
        .unwrap()
}

/// A row set `dispatching` by hand ahead of its time has no record that
/// could be stamped yet: it is settled absent without reading its topic
/// (here the broker named does not answer, so a read would leave it in
/// doubt), and goes out at its time. One due already is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_set_dispatching_ahead_of_its_time_is_settled_without_a_read() {
    let env = api_only(|_| {}).await;
    let ahead = env
        .job_create(serde_json::json!({"key": "ahead", "payload": 1, "delay_ms": 600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    let due = env
        .job_create(serde_json::json!({"key": "due", "payload": 1, "delay_ms": 0}))
        .await["id"]
        .as_u64()
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET status = 'dispatching', claim_token = NULL, claimed_by = NULL, \
         claim_expires_at = NULL WHERE id IN (?, ?)",
    )
    .bind(ahead)
    .bind(due)
    .execute(&env.sql)
    .await
    .unwrap();
    let resume = std::sync::Mutex::new(tickler::kafka::readback::Resume::default());
    let nowhere = "127.0.0.1:9".to_owned();
    let settled = tickler::roles::reconciler::doubts_settle(
        &env.store,
        &env.index,
        &tickler::roles::reconciler::ReadBack {
            brokers: &nowhere,
            options: &env.config.kafka.options,
            wait: Duration::from_millis(500),
            resume: &resume,
        },
        1_000,
        &std::collections::HashSet::new(),
    )
    .await
    .unwrap();
    assert_eq!(settled.absent, 1, "{settled:?}");
    assert_eq!(
        env.job_status(ahead).await,
        "pending",
        "settled without a read"
    );
    assert_eq!(env.job_status(due).await, "dispatching", "left for a read");
    env.finish().await;
}
