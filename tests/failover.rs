//! The stores' own failovers: a MySQL server that turns read-only (a
//! primary during a switchover), kills its connections or is full answers
//! "not now" — the API with 503 `unavailable` and `Retry-After`, the
//! ingress by waiting — and never fails a request for it.
//!
//! tickler runs here as an account with privileges on its databases only,
//! as on a managed MySQL (no SUPER, no READ_ONLY ADMIN): `read_only` holds
//! for it. Each test has a MariaDB of its own, since it flips global
//! settings. Redis with Sentinel: a master replaced by its replica.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde_json::json;
use sqlx::MySqlPool;

use tickler::config::HandEdits;
use tickler::kafka;
use tickler::store::{scratch, Actor, Store, StoreError, TopicChange};
use tickler_testkit::chronos::{self, Expected, Services, World};
use tickler_testkit::procs::PrivateMariadb;
use tickler_testkit::replication::{
    replica_promote, GaleraCluster, PrivateProxy, ReplicatedMariadb,
};
use tickler_testkit::sentinel::{redis_cli, sentinel_master_port, RedisWithSentinels};
use tickler_testkit::{consumer_from_beginning, eventually, records_read_keys, unique};

/// tickler's account: every privilege on the test databases, nothing
/// global.
const ACCOUNT: &str = "app:app-secret";

async fn root_pool(mariadb: &PrivateMariadb) -> MySqlPool {
    eventually(Duration::from_secs(30), || async {
        MySqlPool::connect(&mariadb.server_url()).await.ok()
    })
    .await
    .expect("the private mariadb takes connections")
}

async fn account_create(root: &MySqlPool) {
    for statement in [
        "CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'app-secret'",
        "GRANT ALL PRIVILEGES ON `tickler\\_t\\_%`.* TO 'app'@'127.0.0.1'",
    ] {
        sqlx::query(statement).execute(root).await.unwrap();
    }
}

/// A migrated database on `mariadb`; tickler's account's URL to it.
async fn database_for_account(mariadb: &PrivateMariadb) -> String {
    let name = unique("tickler_t_");
    scratch::scratch_database_create(&mariadb.server_url(), &name, HandEdits::Off)
        .await
        .expect("database created");
    format!("mysql://{ACCOUNT}@127.0.0.1:{}/{name}", mariadb.port)
}

/// The server's ids of the account's connections.
async fn account_connections(root: &MySqlPool) -> HashSet<i64> {
    sqlx::query_scalar::<_, i64>("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = 'app'")
        .fetch_all(root)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

async fn global_set(root: &MySqlPool, setting: &str) {
    sqlx::query(&format!("SET GLOBAL {setting}"))
        .execute(root)
        .await
        .unwrap();
}

/// A request topic and a reply topic of this test's own, and the `ingress`
/// setting that reads the one and answers on the other, scheduling onto
/// the fault worlds' topics.
async fn ingress_topics(brokers: &str) -> (String, String, String) {
    let requests = unique("tickler-requests-");
    let replies = unique("tickler-replies-");
    for topic in [&requests, &replies] {
        kafka::topic_ensure(brokers, topic, 2).await.unwrap();
    }
    let ingress = format!(
        "{{topics={{\"{requests}\"={{targets=[\"tickler-fault-*\"]}}}}, reply_topic=\"{replies}\", group=\"{}\"}}",
        unique("tickler-t-ingress-")
    );
    (requests, replies, ingress)
}

/// Produces a request for a job on `target` keyed `key` at `at`, and waits
/// for the broker's acknowledgement: one record per batch.
async fn request_send(
    producer: &rdkafka::producer::FutureProducer,
    requests: &str,
    target: &str,
    key: &str,
    at: chrono::DateTime<Utc>,
) {
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "tickler-target-topic",
            value: Some(target),
        })
        .insert(Header {
            key: "tickler-run-at",
            value: Some(tickler::domain::job::time_format(at).as_str()),
        });
    producer
        .send(
            FutureRecord::<str, [u8]>::to(requests)
                .key(key)
                .payload(key.as_bytes())
                .headers(headers),
            Duration::from_secs(5),
        )
        .await
        .expect("request produced");
}

/// The keys of the requests answered on `replies` (read from its start, up
/// to `n` keys or `wait`); none of the answers may be `error`.
async fn replies_none_refused(
    brokers: &str,
    replies: &str,
    n: usize,
    wait: Duration,
) -> HashSet<String> {
    let reader = consumer_from_beginning(brokers, replies);
    let answered = records_read_keys(&reader, n, wait).await;
    for reply in &answered {
        assert_ne!(
            reply.header("tickler-outcome"),
            Some("error"),
            "request {:?} refused: {:?}",
            reply.key,
            String::from_utf8_lossy(&reply.payload)
        );
    }
    answered.iter().filter_map(|r| r.key.clone()).collect()
}

fn pause_change() -> TopicChange {
    TopicChange {
        paused: Some(true),
        ..TopicChange::default()
    }
}

#[tokio::test]
async fn a_read_only_server_is_unavailable_and_its_connections_are_not_used_again() {
    tickler_testkit::init_logging();
    let mariadb = PrivateMariadb::start().await;
    let root = root_pool(&mariadb).await;
    account_create(&root).await;
    let url = database_for_account(&mariadb).await;
    let store = Store::connect_lazy(&url, 4, Actor::Cli).unwrap();
    store
        .topic_control_set("t", &pause_change(), "test")
        .await
        .expect("a write before the switchover");
    let before = account_connections(&root).await;
    assert!(!before.is_empty());

    global_set(&root, "read_only = ON").await;
    let refused = store
        .topic_control_set("t", &pause_change(), "test")
        .await
        .expect_err("a read-only server takes no write");
    assert!(
        matches!(refused, StoreError::Unavailable(_)),
        "read-only is the server's state, not the request's fault: {refused:?}"
    );
    // Reads go on meanwhile (on fresh connections).
    store
        .ping()
        .await
        .expect("reads answer on a read-only server");

    global_set(&root, "read_only = OFF").await;
    store
        .topic_control_set("t", &pause_change(), "test")
        .await
        .expect("a write after the switchover");
    // No connection that met the read-only server is used again: behind a
    // switched address, it would still point at the demoted primary.
    let replaced = eventually(Duration::from_secs(5), || async {
        let now = account_connections(&root).await;
        now.is_disjoint(&before).then_some(now)
    })
    .await;
    assert!(
        replaced.is_some(),
        "connections opened before the read-only answer are closed: before {before:?}, now {:?}",
        account_connections(&root).await
    );
    store.close().await;
}

#[tokio::test]
async fn killed_connections_and_a_full_server_are_unavailable_not_failures() {
    tickler_testkit::init_logging();
    let mariadb = PrivateMariadb::start().await;
    let root = root_pool(&mariadb).await;
    account_create(&root).await;
    let url = database_for_account(&mariadb).await;

    // KILL CONNECTION, as a failover tool does to a demoted primary's
    // sessions: the next statement on each is unavailable at worst.
    let store = Store::connect_lazy(&url, 2, Actor::Cli).unwrap();
    store
        .topic_control_set("t", &pause_change(), "test")
        .await
        .unwrap();
    for id in account_connections(&root).await {
        sqlx::query(&format!("KILL CONNECTION {id}"))
            .execute(&root)
            .await
            .unwrap();
    }
    let mut written = false;
    for _ in 0..5 {
        match store.topic_control_set("t", &pause_change(), "test").await {
            Ok(_) => {
                written = true;
                break;
            }
            Err(StoreError::Unavailable(_)) => {}
            Err(other) => panic!("a killed connection is not the request's fault: {other:?}"),
        }
    }
    assert!(
        written,
        "the pool reconnects after its connections are killed"
    );
    store.close().await;

    // The account's max_user_connections.
    sqlx::query("ALTER USER 'app'@'127.0.0.1' WITH MAX_USER_CONNECTIONS 1")
        .execute(&root)
        .await
        .unwrap();
    let holder = Store::connect_lazy(&url, 1, Actor::Cli).unwrap();
    holder.ping().await.unwrap();
    let store = Store::connect_lazy(&url, 1, Actor::Cli).unwrap();
    let full = store.ping().await.expect_err("the account is at its limit");
    assert!(
        matches!(full, StoreError::Unavailable(_)),
        "max_user_connections: {full:?}"
    );
    store.close().await;
    holder.close().await;
    sqlx::query("ALTER USER 'app'@'127.0.0.1' WITH MAX_USER_CONNECTIONS 0")
        .execute(&root)
        .await
        .unwrap();

    // The server's max_connections (at least 10 on MariaDB): filled with
    // root's connections.
    global_set(&root, "max_connections = 10").await;
    let mut fill = Vec::new();
    loop {
        let (_, connected): (String, String) =
            sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
                .fetch_one(&root)
                .await
                .unwrap();
        if connected.parse::<u32>().unwrap() >= 10 {
            break;
        }
        fill.push(
            <sqlx::MySqlConnection as sqlx::Connection>::connect(&mariadb.server_url())
                .await
                .unwrap(),
        );
    }
    let store = Store::connect_lazy(&url, 1, Actor::Cli).unwrap();
    let full = store.ping().await.expect_err("the server is full");
    drop(fill);
    global_set(&root, "max_connections = 500").await;
    assert!(
        matches!(full, StoreError::Unavailable(_)),
        "max_connections: {full:?}"
    );
    store.ping().await.expect("room again");
    store.close().await;
}

/// The switchover measured from outside: MySQL read-only for 3 s while
/// requests arrive on the request topic and on the API. A long run
/// (`TICKLER_STORES_ROUNDS`) flips it that many times, 300 requests and
/// 150 creates each.
#[tokio::test]
async fn three_seconds_read_only_loses_no_request_and_answers_503_with_retry_after() {
    let rounds = rounds();
    let mariadb = PrivateMariadb::start().await;
    let root = root_pool(&mariadb).await;
    account_create(&root).await;
    let services = Services {
        mysql_server_url: mariadb.server_url(),
        tickler_account: Some(ACCOUNT.to_owned()),
        ..Services::shared()
    };
    let (requests, replies, ingress) = ingress_topics(&services.brokers).await;
    let world = World::start(
        services,
        &[
            ("TICKLER_INGRESS", ingress.as_str()),
            ("TICKLER_KAFKA_MESSAGE_TIMEOUT_MS", "10000"),
            ("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "13000"),
        ],
    )
    .await;

    // The API's creates, side by side with the ingress's requests.
    let api = {
        let http = world.http.clone();
        let url = format!("http://{}/v1/jobs", world.http_addr);
        let topic = world.topic.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in 0..150 * rounds {
                let key = format!("api-{i}");
                let sent = http
                    .post(&url)
                    .json(&json!({"topic": topic, "key": key, "payload": i, "delay_ms": 2_000}))
                    .send()
                    .await
                    .expect("the API answers");
                let status = sent.status().as_u16();
                let retry_after = sent
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let body: serde_json::Value = sent.json().await.unwrap_or_default();
                answers.push((key, status, retry_after, body));
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            answers
        })
    };

    let producer =
        tickler_testkit::producer(&world.services.brokers, &BTreeMap::new(), 0, 5_000).unwrap();
    let n: usize = 300 * rounds;
    let started = Utc::now();
    let mut due: HashMap<String, i64> = HashMap::new();
    let mut flip: Option<tokio::task::JoinHandle<()>> = None;
    for i in 0..n {
        if i % 300 == 50 {
            if let Some(flip) = flip.take() {
                flip.await.unwrap();
            }
            let root = root.clone();
            flip = Some(tokio::spawn(async move {
                global_set(&root, "read_only = ON").await;
                tokio::time::sleep(Duration::from_secs(3)).await;
                global_set(&root, "read_only = OFF").await;
            }));
        }
        let key = format!("r-{i}");
        let at = Utc::now().max(started) + chrono::Duration::milliseconds(2_000);
        due.insert(key.clone(), at.timestamp_millis());
        request_send(&producer, &requests, &world.topic, &key, at).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    flip.expect("flipped").await.unwrap();
    let answers = api.await.unwrap();

    // The API: a 2xx, or 503 `unavailable` with Retry-After; never a 500.
    let mut unavailable = 0;
    let mut created_keys: HashSet<String> = HashSet::new();
    for (key, status, retry_after, body) in &answers {
        match status {
            201 => {
                created_keys.insert(key.clone());
            }
            503 => {
                unavailable += 1;
                assert_eq!(body["error"]["code"], "unavailable", "{body}");
                assert!(retry_after.is_some(), "a 503 says when to try again");
            }
            other => panic!("create {key} answered {other}: {body}"),
        }
    }
    println!(
        "three seconds read-only: API {} × 201, {unavailable} × 503",
        created_keys.len()
    );
    assert!(
        unavailable > 0,
        "the read-only server was met (else this test shows nothing)"
    );

    // Every ingress request is a job; the API's 503s wrote nothing.
    let rows = eventually(Duration::from_secs(60), || async {
        let rows: Vec<(u64, String)> = sqlx::query_as("SELECT id, CAST(job_key AS CHAR) FROM jobs")
            .fetch_all(&world.sql)
            .await
            .unwrap();
        let requested = rows.iter().filter(|(_, key)| key.starts_with("r-")).count();
        (requested >= n).then_some(rows)
    })
    .await
    .expect("every ingress request is written");
    let api_keys: HashSet<String> = rows
        .iter()
        .filter(|(_, key)| key.starts_with("api-"))
        .map(|(_, key)| key.clone())
        .collect();
    assert_eq!(
        api_keys, created_keys,
        "a 503 wrote nothing, a 201 wrote its job"
    );
    let answered = replies_none_refused(
        &world.services.brokers,
        &replies,
        n,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(answered.len(), n, "every request answered");

    // And every job arrives, none early.
    let expected: Vec<Expected> = rows
        .iter()
        .filter_map(|(id, key)| {
            let due_ms = due.get(key).copied()?;
            Some(Expected { id: *id, due_ms })
        })
        .collect();
    let ids: HashSet<u64> = expected.iter().map(|e| e.id).collect();
    world.await_seen(&ids, Duration::from_secs(60)).await;
    let interrupted = world.interrupted().await;
    let verdict = chronos::check(
        &expected,
        &HashSet::new(),
        &interrupted,
        &world.seen_audited().await,
    );
    verdict.assert_clean("three seconds read-only");
    world.finish().await;
}

/// A MySQL primary switch, as a managed MySQL fails over: a primary and a
/// semi-synchronous replica behind one address (HAProxy), two tickler
/// instances under API and ingress load. The primary is killed with -9,
/// the replica promoted once it has applied what it received, the address
/// switched to it. Every create answered 201 and every request answered
/// exists afterwards, the API answered only 201 or 503 with `Retry-After`,
/// no request was answered `error`, every job arrived, none early, no
/// unexplained duplicate. How soon dispatch resumed after the promotion is
/// printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_switch_loses_no_acknowledged_job_and_answers_503_meanwhile() {
    let ReplicatedMariadb {
        mut primary,
        replica,
    } = ReplicatedMariadb::start().await;
    let proxy = PrivateProxy::start(primary.port).await;
    let root = root_pool(&primary).await;
    account_create(&root).await;
    root.close().await;
    let services = Services {
        mysql_server_url: proxy.server_url(),
        tickler_account: Some(ACCOUNT.to_owned()),
        ..Services::shared()
    };
    let (requests, replies, ingress) = ingress_topics(&services.brokers).await;
    let world = World::start_many(
        services,
        2,
        &[
            ("TICKLER_INGRESS", ingress.as_str()),
            ("TICKLER_CLUSTER_INSTANCE_TTL_MS", "2000"),
            ("TICKLER_KAFKA_MESSAGE_TIMEOUT_MS", "10000"),
            ("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "13000"),
        ],
    )
    .await;

    // The API's creates on both instances, side by side with the requests.
    let api = {
        let http = world.http.clone();
        let urls: Vec<String> = world
            .http_addrs
            .iter()
            .map(|addr| format!("http://{addr}/v1/jobs"))
            .collect();
        let topic = world.topic.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in 0..200 {
                let key = format!("api-{i}");
                let asked_at = Utc::now();
                let sent = http
                    .post(&urls[i % urls.len()])
                    .json(&json!({"topic": topic, "key": key, "payload": i, "delay_ms": 3_000}))
                    .send()
                    .await
                    .expect("the API answers");
                let status = sent.status().as_u16();
                let retry_after = sent.headers().get("retry-after").is_some();
                let body: serde_json::Value = sent.json().await.unwrap_or_default();
                answers.push((key, status, retry_after, body, asked_at));
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            answers
        })
    };

    let producer =
        tickler_testkit::producer(&world.services.brokers, &BTreeMap::new(), 0, 5_000).unwrap();
    let n: usize = 300;
    let mut due: HashMap<String, i64> = HashMap::new();
    let mut promoted_at = None;
    for i in 0..n {
        if i == 60 {
            // The switchover: the primary dies, the replica is promoted
            // once it has applied all it received, the address follows.
            primary.proc.kill9();
            tokio::time::sleep(Duration::from_secs(1)).await;
            replica_promote(&replica).await;
            proxy.switch(replica.port).await;
            promoted_at = Some(Utc::now());
        }
        let key = format!("r-{i}");
        let at = Utc::now() + chrono::Duration::milliseconds(3_000);
        due.insert(key.clone(), at.timestamp_millis());
        request_send(&producer, &requests, &world.topic, &key, at).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let promoted_at = promoted_at.expect("switched over");
    // The old primary comes back, read-only as a demoted one does.
    primary.proc.start();
    let old_root = root_pool(&primary).await;
    global_set(&old_root, "read_only = ON").await;
    let answers = api.await.unwrap();

    let mut tally: BTreeMap<u16, usize> = BTreeMap::new();
    let mut acknowledged: HashSet<String> = HashSet::new();
    for (key, status, retry_after, body, asked_at) in &answers {
        *tally.entry(*status).or_default() += 1;
        match status {
            201 => {
                acknowledged.insert(key.clone());
                due.insert(
                    key.clone(),
                    (*asked_at + chrono::Duration::milliseconds(3_000)).timestamp_millis(),
                );
            }
            503 => {
                assert_eq!(body["error"]["code"], "unavailable", "{body}");
                assert!(retry_after, "a 503 says when to try again");
            }
            other => panic!("create {key} answered {other}: {body}"),
        }
    }
    println!("primary switch: API answers {tally:?}");

    // Everything acknowledged is on the promoted replica.
    let sql = MySqlPool::connect(&format!("{}/{}", proxy.server_url(), world.db_name))
        .await
        .unwrap();
    let rows = eventually(Duration::from_secs(90), || async {
        let rows: Vec<(u64, String)> = sqlx::query_as("SELECT id, CAST(job_key AS CHAR) FROM jobs")
            .fetch_all(&sql)
            .await
            .ok()?;
        let requested = rows.iter().filter(|(_, key)| key.starts_with("r-")).count();
        (requested >= n).then_some(rows)
    })
    .await
    .expect("every ingress request is written");
    let keys: HashSet<&String> = rows.iter().map(|(_, key)| key).collect();
    let missing: Vec<&String> = acknowledged.iter().filter(|k| !keys.contains(k)).collect();
    assert!(
        missing.is_empty(),
        "creates answered 201 and gone: {missing:?}"
    );
    let answered = replies_none_refused(
        &world.services.brokers,
        &replies,
        n,
        Duration::from_secs(60),
    )
    .await;
    // Every request is a job (above), answered, and no reply says `error`.
    assert_eq!(answered.len(), n, "every request is answered");

    // Every job arrives, none early; dispatch resumed after the promotion.
    let expected: Vec<Expected> = rows
        .iter()
        .filter(|(_, key)| key.starts_with("r-") || acknowledged.contains(key))
        .map(|(id, key)| Expected {
            id: *id,
            due_ms: due[key],
        })
        .collect();
    let ids: HashSet<u64> = expected.iter().map(|e| e.id).collect();
    world.await_seen(&ids, Duration::from_secs(90)).await;
    let seen = world.seen_audited().await;
    let resumed_ms = seen
        .iter()
        .map(|s| s.dispatched_at_ms)
        .filter(|ms| *ms >= promoted_at.timestamp_millis())
        .min()
        .map(|ms| ms - promoted_at.timestamp_millis());
    println!("primary switch: first record dispatched {resumed_ms:?} ms after the promotion");
    let interrupted = world.interrupted().await;
    let verdict = chronos::check(&expected, &HashSet::new(), &interrupted, &seen);
    verdict.assert_clean("a primary switch");
    // Nothing of tickler's reached the old primary once it was back.
    let tickler_there: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?")
            .bind(ACCOUNT.split(':').next().unwrap())
            .fetch_one(&old_root)
            .await
            .unwrap();
    assert_eq!(
        tickler_there, 0,
        "no connection of tickler's to the old primary"
    );
    old_root.close().await;
    sql.close().await;
    world.finish().await;
}

/// Galera: two instances on different nodes of a three-node cluster, 2,000
/// jobs due over 8 s, and the node one of them uses killed with -9 half-way.
/// That instance can no longer beat its heart, so the other takes its
/// shards and settles its claims; the cluster goes on with two nodes.
/// Conflicting commits on different nodes fail certification (a deadlock
/// to the client), which tickler retries as contention. Nothing lost,
/// nothing early, no unexplained duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn galera_losing_a_node_under_load_loses_nothing() {
    let mut galera = GaleraCluster::start().await;
    let root = root_pool(&galera.nodes[0]).await;
    account_create(&root).await;
    root.close().await;
    let services = Services {
        mysql_server_url: galera.nodes[0].server_url(),
        tickler_account: Some(ACCOUNT.to_owned()),
        ..Services::shared()
    };
    let mut world = World::start_many(
        services,
        2,
        &[
            ("TICKLER_CLUSTER_INSTANCE_TTL_MS", "2000"),
            ("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "30000"),
            ("TICKLER_CLUSTER_SHARDS", "8"),
            // The instance left without its node stops in seconds at the
            // end (its drain cannot record anything).
            ("TICKLER_SHUTDOWN_TIMEOUT_MS", "5000"),
        ],
    )
    .await;
    // The second instance on the second node.
    let on_second = format!(
        "mysql://{ACCOUNT}@127.0.0.1:{}/{}",
        galera.nodes[1].port, world.db_name
    );
    let second = world.instance_mut(1);
    second.stop();
    second.env_set("TICKLER_MYSQL_URL", &on_second);
    second.start();
    world.healthy_instance(1).await;
    let spread = eventually(Duration::from_secs(30), || async {
        let owners: Vec<(u64, i64)> = sqlx::query_as(
            "SELECT owner, COUNT(*) FROM shard_leases WHERE owner IS NOT NULL GROUP BY owner",
        )
        .fetch_all(&world.sql)
        .await
        .ok()?;
        (owners.len() == 2 && owners.iter().all(|(_, n)| *n == 4)).then_some(())
    })
    .await;
    assert!(spread.is_some(), "the shards spread over the two instances");
    let t0 = Utc::now() + chrono::Duration::seconds(3);
    let scheduling = std::time::Instant::now();
    let expected = world
        .jobs_schedule_batched(2_000, t0, Duration::from_secs(8))
        .await;
    println!(
        "galera: 2000 jobs created in {} ms (the first due 3000 ms after the start)",
        scheduling.elapsed().as_millis()
    );
    tokio::time::sleep_until(
        tokio::time::Instant::now()
            + (t0 + chrono::Duration::seconds(4) - Utc::now())
                .to_std()
                .unwrap_or_default(),
    )
    .await;
    galera.nodes[1].proc.kill9();
    let ids: HashSet<u64> = expected.iter().map(|e| e.id).collect();
    world.await_seen(&ids, Duration::from_secs(90)).await;
    let interrupted = world.interrupted().await;
    let verdict = chronos::check(
        &expected,
        &HashSet::new(),
        &interrupted,
        &world.seen_audited().await,
    );
    verdict.assert_clean("a galera node killed under load");
    world.finish().await;
}

/// How many times a long run repeats each store's fault
/// (`TICKLER_STORES_ROUNDS`, from `scripts/chaos --stores`); once in the
/// suite.
fn rounds() -> usize {
    std::env::var("TICKLER_STORES_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Redis with Sentinel: two instances following the master three
/// sentinels name, 2,000 jobs due over 8 s, and the master killed with -9
/// half-way. The sentinels promote the replica (the writes it had not
/// received are gone); tickler asks them for the new master on its next
/// command and repairs what the index lost from MySQL. The old master then
/// comes back, empty, and is made a replica. Nothing lost, nothing early.
/// A long run repeats it: 2,000 jobs and one kill of whichever server is
/// master every 8 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_master_replaced_through_sentinel_loses_nothing() {
    let rounds = rounds();
    let redis = RedisWithSentinels::start().await;
    let services = Services {
        redis_url: redis.url(),
        ..Services::shared()
    };
    let world = World::start_many(
        services,
        2,
        &[
            ("TICKLER_CLUSTER_INSTANCE_TTL_MS", "2000"),
            ("TICKLER_CLUSTER_SHARDS", "8"),
        ],
    )
    .await;
    let t0 = Utc::now() + chrono::Duration::seconds(3);
    let expected = world
        .jobs_schedule_batched(2_000 * rounds, t0, Duration::from_secs(8 * rounds as u64))
        .await;
    let RedisWithSentinels {
        master,
        replica,
        sentinels,
    } = redis;
    let mut servers = [master, replica];
    for round in 0..rounds {
        let kill_at = t0 + chrono::Duration::seconds(4 + 8 * round as i64);
        tokio::time::sleep_until(
            tokio::time::Instant::now() + (kill_at - Utc::now()).to_std().unwrap_or_default(),
        )
        .await;
        let old = sentinel_master_port(&sentinels).expect("the sentinels name a master");
        let victim = servers
            .iter_mut()
            .find(|server| server.port == old)
            .expect("the master is one of the two servers");
        victim.proc.kill9();
        let killed_at = std::time::Instant::now();
        let promoted = eventually(Duration::from_secs(30), || async {
            let port = sentinel_master_port(&sentinels).filter(|port| *port != old)?;
            redis_cli(port, &["ROLE"])?
                .starts_with("master")
                .then_some(port)
        })
        .await
        .expect("the sentinels promote the replica");
        println!(
            "sentinel round {round}: the replica on {promoted} promoted {} ms after the kill",
            killed_at.elapsed().as_millis()
        );
        // The old master comes back empty and is made a replica of the
        // new one, to be promoted in its turn (Sentinel's work, not
        // tickler's: waited for only when another round follows).
        victim.proc.start();
        if round + 1 == rounds {
            continue;
        }
        let demoted = eventually(Duration::from_secs(60), || async {
            let info = redis_cli(old, &["INFO", "replication"])?;
            (info.contains("role:slave") && info.contains("master_link_status:up")).then_some(())
        })
        .await;
        assert!(
            demoted.is_some(),
            "the old master rejoins as a synced replica"
        );
    }
    let ids: HashSet<u64> = expected.iter().map(|e| e.id).collect();
    world.await_seen(&ids, Duration::from_secs(90)).await;
    let interrupted = world.interrupted().await;
    let verdict = chronos::check(
        &expected,
        &HashSet::new(),
        &interrupted,
        &world.seen_audited().await,
    );
    verdict.assert_clean("a redis master replaced through sentinel");
    world.finish().await;
    drop(sentinels);
}
