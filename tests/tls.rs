//! TLS to every store, and HTTPS for the API, against real servers with a
//! CA and certificates the test makes: each is connected through, and each
//! refuses to start with a CA that did not sign the server's certificate —
//! naming the setting and the host, never falling back to plaintext.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use serde_json::json;
use sqlx::mysql::MySqlPool;
use sqlx::Connection;
use tickler::app::{self, StartError};
use tickler::config::Role;
use tickler::kafka;
use tickler::store::Store;
use tickler_testkit::procs::{PrivateMariadb, PrivateRedis, PrivateTansu};
use tickler_testkit::tls::{path, TestCerts};
use tickler_testkit::{
    database_create, database_drop, http_with_token, records_read, test_config, token_create,
    unique, TestEnv,
};
use tokio_util::sync::CancellationToken;

fn start_error(result: Result<app::Running, StartError>) -> String {
    match result {
        Ok(_) => panic!("start-up should have been refused"),
        Err(err) => err.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_over_tls_with_verified_identity_and_a_wrong_ca_stops_start_up() {
    let certs = TestCerts::generate();
    let mariadb = PrivateMariadb::start_tls(&certs).await;
    let tls = |ca: &std::path::Path| format!("?ssl-mode=VERIFY_IDENTITY&ssl-ca={}", path(ca));
    // The server takes no plaintext connection at all.
    let plain = format!("{}?ssl-mode=disabled", mariadb.server_url());
    let refused = sqlx::mysql::MySqlConnection::connect(&plain).await;
    assert!(refused.is_err(), "require_secure_transport is in force");

    let server = format!("{}{}", mariadb.server_url(), tls(&certs.ca));
    let mut admin = sqlx::mysql::MySqlConnection::connect(&server)
        .await
        .unwrap();
    sqlx::query("CREATE DATABASE tickler")
        .execute(&mut admin)
        .await
        .unwrap();
    let url = format!("{}/tickler{}", mariadb.server_url(), tls(&certs.ca));
    Store::migrate(&url).await.expect("migrates over TLS");

    let mut config = test_config(&url, &unique("tickler-t-"));
    config.roles = vec![Role::Api];
    let topic = unique("tickler-test-");
    kafka::topic_ensure(&config.kafka.brokers, &topic, 1)
        .await
        .unwrap();
    let secret = token_create(&url, "tls", &["*"], &["admin"]).await;
    let running = app::start(config.clone(), CancellationToken::new())
        .await
        .expect("starts over TLS");
    let http = http_with_token(&secret);
    let response = http
        .post(format!("http://{}/v1/jobs", running.http_addr.unwrap()))
        .json(&json!({"topic": topic, "payload": 1, "delay_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let pool = MySqlPool::connect(&url).await.unwrap();
    let cipher: (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(!cipher.1.is_empty(), "the session is encrypted");
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 1);
    running.shutdown().await;

    let mut wrong = config;
    wrong.mysql.url = format!("{}/tickler{}", mariadb.server_url(), tls(&certs.wrong_ca));
    let err = start_error(app::start(wrong, CancellationToken::new()).await);
    assert!(
        err.contains("mysql.url") && err.contains(&format!("127.0.0.1:{}", mariadb.port)),
        "{err}"
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_only_carries_jobs_and_a_wrong_ca_stops_start_up() {
    let certs = TestCerts::generate();
    let redis = PrivateRedis::start_tls(&certs).await;
    let ca = path(&certs.ca);
    let url = redis.tls_url();
    let env = TestEnv::start_with(|c| {
        c.redis.url = url.clone();
        c.redis.tls_ca = Some(ca.clone());
    })
    .await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": {"tls": true}, "delay_ms": 200}))
        .await;
    let records = records_read(&consumer, 1, Duration::from_secs(20)).await;
    assert_eq!(records.len(), 1, "the job went through Redis over TLS");
    assert_eq!(
        records[0].header("tickler-job-id"),
        Some(job["id"].to_string().as_str())
    );

    let mut wrong = env.config.clone();
    wrong.redis.tls_ca = Some(path(&certs.wrong_ca));
    let err = start_error(app::start(wrong, CancellationToken::new()).await);
    assert!(
        err.contains("redis.url")
            && err.contains("redis.tls_ca")
            && err.contains(&format!("127.0.0.1:{}", redis.port)),
        "{err}"
    );
    env.finish().await;
}

fn kafka_tls(ca: &std::path::Path) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("security.protocol".to_owned(), "SSL".to_owned()),
        ("ssl.ca.location".to_owned(), path(ca)),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_tls_delivers_and_a_wrong_ca_stops_start_up() {
    let certs = TestCerts::generate();
    let (broker, _terminator) = PrivateTansu::start_behind_tls(&certs).await;
    let options = kafka_tls(&certs.ca);
    let brokers = broker.brokers();
    // Plaintext to a TLS-only broker gets nowhere.
    let plain = kafka::topic_ensure(&brokers, "never", 1).await;
    assert!(plain.is_err(), "plaintext is not answered");

    let env = TestEnv::start_with(|c| {
        c.kafka.brokers = brokers.clone();
        c.kafka.options = options.clone();
    })
    .await;
    let mut client = kafka::client_config(&brokers);
    client
        .set("group.id", unique("tickler-t-"))
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "50");
    for (key, value) in &options {
        client.set(key, value);
    }
    let consumer: StreamConsumer = client.create().unwrap();
    consumer.subscribe(&[&env.topic]).unwrap();
    let job = env
        .job_create(json!({"payload": "over tls", "delay_ms": 200}))
        .await;
    let records = records_read(&consumer, 1, Duration::from_secs(30)).await;
    assert_eq!(records.len(), 1, "produced through TLS");
    assert_eq!(
        records[0].header("tickler-job-id"),
        Some(job["id"].to_string().as_str())
    );

    let mut wrong = env.config.clone();
    wrong.kafka.options = kafka_tls(&certs.wrong_ca);
    let err = start_error(app::start(wrong, CancellationToken::new()).await);
    assert!(
        err.contains("kafka") && err.contains(&brokers) && err.contains("ssl.ca.location"),
        "{err}"
    );
    env.finish().await;
}

/// curl, which checks the certificate against `ca`.
fn curl(ca: &std::path::Path, url: &str) -> (bool, String) {
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", &path(ca), url])
        .output()
        .expect("curl");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_speaks_https_with_its_certificate() {
    let certs = TestCerts::generate();
    let (cert, key) = (path(&certs.server_cert), path(&certs.server_key));
    let env = TestEnv::start_with(|c| {
        c.api.tls_cert = Some(cert.clone());
        c.api.tls_key = Some(key.clone());
    })
    .await;
    let https = env.base_url.replace("http://", "https://");
    let (ok, body) = curl(&certs.ca, &format!("{https}/healthz"));
    assert!(ok && body.contains("\"ok\""), "{body}");
    let (ok, body) = curl(&certs.wrong_ca, &format!("{https}/healthz"));
    assert!(
        !ok,
        "a client that does not trust the CA is refused: {body}"
    );
    let (ok, body) = curl(&certs.ca, &format!("{https}/v1/jobs/1"));
    assert!(ok && body.contains("unauthorized"), "{body}");
    // The jobs CLI trusts the CA it is given, and no other.
    let cli = |ca: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tickler"))
            .args(["jobs", "list", "--json", "--url", &https, "--ca-cert"])
            .arg(ca)
            .env("TICKLER_TOKEN", &env.admin_secret)
            .output()
            .unwrap()
    };
    let trusted = cli(&certs.ca);
    assert_eq!(
        trusted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    assert!(String::from_utf8_lossy(&trusted.stdout).contains("\"jobs\""));
    let untrusted = cli(&certs.wrong_ca);
    assert_eq!(
        untrusted.status.code(),
        Some(3),
        "an untrusted certificate: unreachable"
    );
    // Plain HTTP on the HTTPS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("{}/healthz", env.base_url))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());

    let mut missing = env.config.clone();
    missing.api.tls_key = Some("/nonexistent/key.pem".to_owned());
    let err = start_error(app::start(missing, CancellationToken::new()).await);
    assert!(
        err.contains("api.tls_key") && err.contains("/nonexistent/key.pem"),
        "{err}"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_is_down_does_not_stop_start_up_but_a_bad_certificate_does() {
    // The distinction the probes make: down is survivable, untrusted is not.
    let (db, url) = database_create().await;
    let mut config = test_config(&url, &unique("tickler-t-"));
    config.mysql.url = "mysql://tickler:tickler@127.0.0.1:1/nothing".to_owned();
    config.roles = vec![Role::Api];
    let running = app::start(config, CancellationToken::new())
        .await
        .expect("starts while MySQL is down");
    running.shutdown().await;
    database_drop(&db).await;
}
