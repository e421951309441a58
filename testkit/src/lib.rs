//! tickler's integration-test harness: every test gets its own database
//! (migrated), Redis key prefix and Kafka topic, and its own tickler started
//! in-process ([`TestEnv`]) or as a process ([`chronos::World`]), so tests
//! run in parallel against the real services started by `scripts/services`.
//! A test that panics still drops its database.

pub mod chronos;
pub mod procs;
pub mod replication;
pub mod sentinel;
pub mod store;
pub mod tls;
pub mod webdriver;

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::{BorrowedMessage, Message, OwnedHeaders};
use rdkafka::Offset;
use serde_json::Value;
use sqlx::mysql::MySqlPool;
use tickler::app::{self, Running};
use tickler::config::{Config, HandEdits};
use tickler::index::Index;
use tickler::kafka;
use tickler::store::{scratch, Store};
use tokio_util::sync::CancellationToken;

/// The MySQL server the tests create their databases on.
pub fn mysql_server_url() -> String {
    std::env::var("TICKLER_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://tickler:tickler@127.0.0.1:3306".to_owned())
}

pub fn redis_url() -> String {
    std::env::var("TICKLER_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned())
}

pub fn kafka_brokers() -> String {
    std::env::var("TICKLER_TEST_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned())
}

pub fn unique(prefix: &str) -> String {
    let n: u64 = rand::rng().random();
    format!("{prefix}{n:016x}")
}

/// A fresh directory under the system's temp dir, for a test's files.
pub fn scratch_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("tickler-faults").join(unique(""));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Initialises logging once (RUST_LOG-style filter in TICKLER_TEST_LOG).
pub fn init_logging() {
    let filter = std::env::var("TICKLER_TEST_LOG").unwrap_or_else(|_| "warn".to_owned());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_test_writer()
        .try_init();
}

/// Creates a fresh database and applies the migrations; returns its URL.
///
/// A loaded machine running the suite in parallel has, once in a few
/// hundred runs, failed a create (the error was lost with the panic's
/// message): each failure is printed and the database made afresh, three
/// times at most, so a real fault still fails the test with its error.
pub async fn database_create() -> (String, String) {
    let mut last = String::new();
    for attempt in 1..=3 {
        let name = unique("tickler_t_");
        match scratch::scratch_database_create(&mysql_server_url(), &name, HandEdits::Observe).await
        {
            Ok(url) => return (name, url),
            Err(err) => {
                eprintln!("database_create attempt {attempt} ({name}): {err}");
                last = err.to_string();
                database_drop(&name).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    panic!("mysql is running (scripts/services) and takes a new database: {last}");
}

pub async fn database_drop(name: &str) {
    let _ = scratch::scratch_database_drop(&mysql_server_url(), name).await;
}

/// Settings for a test tickler: small intervals, few shards, random port.
pub fn test_config(mysql_url: &str, prefix: &str) -> Config {
    let mut config = Config::default();
    config.mysql.url = mysql_url.to_owned();
    config.mysql.pool_size = 8;
    // The suite runs as tickler runs on TiDB or Vitess (#62): nothing only
    // MySQL has, hand edits observed rather than caught by a trigger.
    config.mysql.engine = tickler::config::Engine::Portable;
    config.mysql.history_hand_edits = HandEdits::Observe;
    config.redis.url = redis_url();
    config.redis.prefix = prefix.to_owned();
    config.kafka.brokers = kafka_brokers();
    config.api.addr = "127.0.0.1:0".to_owned();
    config.cluster.shards = 4;
    config.loader.interval_ms = 200;
    config.schedules.interval_ms = 200;
    config.dispatcher.idle_ms = 200;
    config.dispatcher.claim_lease_ms = 15_000;
    config.results.topic = unique("tickler-results-");
    config.results.group = unique("tickler-t-");
    config.results.topic_partitions = 2;
    config
}

/// Makes a token in the database at `mysql.url` (no rate limits, so tests
/// are not throttled unless they ask); returns its secret.
pub async fn token_create(mysql_url: &str, name: &str, topics: &[&str], scopes: &[&str]) -> String {
    token_create_limited(mysql_url, name, topics, scopes, Some(0), Some(0)).await
}

/// `token_create` with rate limits (`None`: the configured defaults).
pub async fn token_create_limited(
    mysql_url: &str,
    name: &str,
    topics: &[&str],
    scopes: &[&str],
    rate_requests: Option<u32>,
    rate_jobs: Option<u32>,
) -> String {
    let store = Store::connect_lazy(mysql_url, 1, tickler::store::Actor::Api).unwrap();
    let secret = tickler::roles::auth::secret_generate();
    let owned = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    store
        .token_create(&tickler::store::NewToken {
            name,
            secret_sha256: tickler::roles::auth::secret_hash(&secret),
            topics: &owned(topics),
            scopes: &owned(scopes),
            rate_requests,
            rate_jobs,
            max_pending_jobs: None,
            max_payload_bytes: None,
        })
        .await
        .expect("token created");
    store.close().await;
    secret
}

/// An HTTP client that sends `Authorization: Bearer <secret>` on every
/// request.
/// Registers an instance in `store`'s database and gives it every one of
/// `shards` shards: the fence a claim made outside a running tickler needs.
pub async fn fence_all(store: &tickler::store::Store, shards: u32) -> tickler::store::Fence {
    let info = tickler::store::InstanceInfo {
        host: "test".to_owned(),
        pid: std::process::id(),
        pid_namespace: None,
        version: "test".to_owned(),
        roles: "dispatcher".to_owned(),
        ttl: None,
        quiet: None,
        ingress_group: None,
        enc_keys: None,
    };
    store.shard_leases_ensure(shards).await.unwrap();
    let instance = store.instance_register(&info).await.unwrap();
    let mut leases = Vec::new();
    for lease in store.shard_leases().await.unwrap() {
        let epoch = store
            .shard_acquire(lease.shard, lease.epoch, instance)
            .await
            .unwrap()
            .expect("the shard is free");
        leases.push((lease.shard, epoch));
    }
    tickler::store::Fence {
        instance,
        leases,
        ttl: std::time::Duration::from_secs(600),
    }
}

pub fn http_with_token(secret: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {secret}").parse().expect("a header value"),
    );
    // A pool that lets a connection go before the server's idle timeout
    // (75 s) does, as a client of tickler should: the server never closes
    // a connection this client is about to reuse.
    reqwest::Client::builder()
        .default_headers(headers)
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
}

/// `tickler serve`'s start, or `tickler dev`'s.
async fn app_start(dev: bool, config: Config) -> Result<Running, app::StartError> {
    if dev {
        app::start_dev(config, CancellationToken::new()).await
    } else {
        app::start(config, CancellationToken::new()).await
    }
}

/// One test's world: database, prefix, topic, and a running tickler.
pub struct TestEnv {
    pub config: Config,
    pub db_name: String,
    /// Direct SQL access, for assertions and hand edits.
    pub sql: MySqlPool,
    pub store: Store,
    pub index: Index,
    pub topic: String,
    pub base_url: String,
    /// Sends the secret of `admin_secret` on every request.
    pub http: reqwest::Client,
    /// A token with every scope on every topic, made before tickler
    /// started (`auth = tokens`, the default).
    pub admin_secret: String,
    running: Option<Running>,
    /// Started as `tickler dev` (a virtual clock).
    dev: bool,
}

impl TestEnv {
    pub async fn start() -> TestEnv {
        TestEnv::start_with(|_| {}).await
    }

    /// Starts with the test configuration adjusted by `adjust`.
    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> TestEnv {
        TestEnv::start_as(false, adjust).await
    }

    /// Starts as `tickler dev` does: on a virtual clock that `POST
    /// /v1/dev/clock` moves.
    pub async fn start_dev_with(adjust: impl FnOnce(&mut Config)) -> TestEnv {
        TestEnv::start_as(true, adjust).await
    }

    async fn start_as(dev: bool, adjust: impl FnOnce(&mut Config)) -> TestEnv {
        init_logging();
        let (db_name, url) = database_create().await;
        let prefix = unique("tickler-t-");
        let mut config = test_config(&url, &prefix);
        adjust(&mut config);
        let topic = unique("tickler-test-");
        kafka::topic_ensure_with(&config.kafka.brokers, &config.kafka.options, &topic, 2)
            .await
            .expect("kafka is running (scripts/services)");
        let admin_secret = token_create(&url, "test-admin", &["*"], &["admin"]).await;
        let running = app_start(dev, config.clone())
            .await
            .expect("tickler starts");
        let base_url = running
            .http_addr
            .map(|addr| format!("http://{addr}"))
            .unwrap_or_default();
        TestEnv {
            sql: MySqlPool::connect(&url).await.unwrap(),
            store: running.store.clone(),
            index: running.index.clone(),
            config,
            db_name,
            topic,
            base_url,
            http: http_with_token(&admin_secret),
            admin_secret,
            running: Some(running),
            dev,
        }
    }

    /// Stops this tickler (as a shutdown: the batch in hand is finished).
    pub async fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown().await;
        }
    }

    /// Starts this tickler again after `stop`, on the same database and
    /// prefix (the API on a new port).
    pub async fn restart(&mut self) {
        self.stop().await;
        let running = app_start(self.dev, self.config.clone())
            .await
            .expect("tickler starts again");
        if let Some(addr) = running.http_addr {
            self.base_url = format!("http://{addr}");
        }
        self.store = running.store.clone();
        self.index = running.index.clone();
        self.running = Some(running);
    }

    /// Another instance of the same deployment (database, prefix), with
    /// every role; stop it with `shutdown`.
    pub async fn another(&self) -> Running {
        app::start(self.config.clone(), CancellationToken::new())
            .await
            .expect("a second tickler starts")
    }

    /// Stops tickler and drops the database.
    pub async fn finish(mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown().await;
        }
        self.sql.close().await;
        database_drop(&self.db_name).await;
    }

    /// Sends `body` (JSON text, sent as is) with `method` to `path`;
    /// returns the status and the parsed answer (Null when not JSON).
    pub async fn request(&self, method: &str, path: &str, body: Option<String>) -> (u16, Value) {
        self.request_with(&self.http, method, path, body).await
    }

    /// `request` through `http` (another token's client, or none). A POST
    /// or PATCH says `application/json`, with a body or without.
    pub async fn request_with(
        &self,
        http: &reqwest::Client,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
        let writes = matches!(method, reqwest::Method::POST | reqwest::Method::PATCH);
        let mut request = http.request(method, format!("{}{path}", self.base_url));
        if body.is_some() || writes {
            request = request.header("content-type", "application/json");
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.request("POST", path, Some(body.to_string())).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, None).await
    }

    /// `GET /metrics`: the status and the Prometheus text.
    pub async fn metrics_text(&self) -> (u16, String) {
        let response = self
            .http
            .get(format!("{}/metrics", self.base_url))
            .send()
            .await
            .expect("the server answers");
        (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        )
    }

    /// Creates a job on this test's topic; panics unless 201.
    pub async fn job_create(&self, mut body: Value) -> Value {
        if body.get("topic").is_none() {
            body["topic"] = Value::String(self.topic.clone());
        }
        let (status, job) = self.post("/v1/jobs", body).await;
        assert_eq!(status, 201, "create failed: {job}");
        job
    }

    pub async fn jobs_count(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
            .fetch_one(&self.sql)
            .await
            .unwrap()
    }

    pub async fn job_status(&self, id: u64) -> String {
        sqlx::query_scalar("SELECT CAST(status AS CHAR) FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&self.sql)
            .await
            .unwrap()
    }

    /// A loader over this test's stores, driven by the test (`run_once`).
    pub fn loader(&self) -> tickler::roles::loader::Loader {
        tickler::roles::loader::Loader::new(
            self.store.clone(),
            self.index.clone(),
            tickler::roles::loader::LoaderConfig::from_config(&self.config),
            std::sync::Arc::new(tokio::sync::Notify::new()),
        )
    }

    /// Waits until job `id` has `status`; panics after `wait`.
    pub async fn status_await(&self, id: u64, status: &str, wait: Duration) {
        let reached = eventually(wait, || async {
            (self.job_status(id).await == status).then_some(())
        })
        .await;
        assert!(
            reached.is_some(),
            "job {id} did not become {status} within {wait:?}"
        );
    }

    /// Waits until job `id`'s history holds a row by `actor` with
    /// `status`: a hand edit is recorded by the reconciler's next pass
    /// (`mysql.history_hand_edits = observe`), not by its statement.
    pub async fn history_await(&self, id: u64, actor: &str, status: &str, wait: Duration) {
        let reached = eventually(wait, || async {
            let (_, history) = self.get(&format!("/v1/jobs/{id}/history")).await;
            history["events"]
                .as_array()?
                .iter()
                .any(|e| e["actor"] == actor && e["status"] == status)
                .then_some(())
        })
        .await;
        assert!(
            reached.is_some(),
            "job {id}'s history has no ({actor}, {status}) within {wait:?}"
        );
    }

    /// Every Redis key under this test's prefix.
    pub async fn redis_keys(&self) -> Vec<String> {
        let client = redis::Client::open(self.config.redis.url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        redis::cmd("KEYS")
            .arg(format!("{{{}:*", self.config.redis.prefix))
            .query_async(&mut conn)
            .await
            .unwrap()
    }

    /// Whether any Redis key of this test holds `id`.
    pub async fn redis_holds(&self, id: u64) -> bool {
        let client = redis::Client::open(self.config.redis.url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let sets = self.redis_keys().await.into_iter();
        for key in sets.filter(|k| k.ends_with(":due") || k.ends_with(":inflight")) {
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg(&key)
                .arg(id)
                .query_async(&mut conn)
                .await
                .unwrap();
            if score.is_some() {
                return true;
            }
        }
        false
    }

    pub fn consumer(&self) -> StreamConsumer {
        consumer_from_beginning(&self.config.kafka.brokers, &self.topic)
    }

    /// The `tickler` binary at `bin` (a test's
    /// `env!("CARGO_BIN_EXE_tickler")`) set to this world: its MySQL,
    /// Redis and prefix, Kafka, shards, results topic and API (with the
    /// admin token); logging warnings only, no standard input.
    pub fn command(&self, bin: &str) -> std::process::Command {
        let mut command = std::process::Command::new(bin);
        command
            .env("TICKLER_MYSQL_URL", &self.config.mysql.url)
            .env("TICKLER_REDIS_URL", &self.config.redis.url)
            .env("TICKLER_REDIS_PREFIX", &self.config.redis.prefix)
            .env("TICKLER_KAFKA_BROKERS", &self.config.kafka.brokers)
            .env("TICKLER_RESULTS_TOPIC", &self.config.results.topic)
            .env("TICKLER_RESULTS_GROUP", &self.config.results.group)
            .env(
                "TICKLER_CLUSTER_SHARDS",
                self.config.cluster.shards.to_string(),
            )
            .env("TICKLER_URL", &self.base_url)
            .env("TICKLER_TOKEN", &self.admin_secret)
            .env("TICKLER_LOG", "warn")
            .stdin(std::process::Stdio::null());
        command
    }
}

/// Runs `command` to its end, off the runtime's threads.
pub async fn output(mut command: std::process::Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || command.output().expect("the command runs"))
        .await
        .expect("the command's thread")
}

/// What a command printed: standard output, then standard error.
pub fn output_text(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// A producer for the tests' own records (requests, reports, records
/// placed by hand): tickler's producer settings (idempotent, `acks=all`),
/// with rdkafka's future-per-record API a test can aim at a partition with.
pub fn producer(
    brokers: &str,
    options: &std::collections::BTreeMap<String, String>,
    linger_ms: u64,
    message_timeout_ms: u64,
) -> rdkafka::error::KafkaResult<rdkafka::producer::FutureProducer> {
    let mut config = rdkafka::ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", "tickler-test")
        .set("log_level", "3")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", linger_ms.to_string())
        .set("message.timeout.ms", message_timeout_ms.to_string());
    for (key, value) in options {
        config.set(key, value);
    }
    config.create()
}

/// A consumer reading every partition of `topic` from the beginning. Like
/// a real consumer it waits for a broker that is (re)starting — a refused
/// connection or a failed metadata fetch is tried again for up to a minute —
/// and only then gives up.
pub fn consumer_from_beginning(brokers: &str, topic: &str) -> StreamConsumer {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match kafka::tail::consumer_assigned(brokers, topic, Offset::Beginning) {
            Ok(consumer) => return consumer,
            Err(err) if std::time::Instant::now() < deadline => {
                eprintln!("kafka consumer not ready ({err}); trying again");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(err) => panic!("kafka consumer after a minute of trying: {err}"),
        }
    }
}

/// A record as the tests look at it.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub headers: Vec<(String, String)>,
}

impl Record {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn from_message(message: &BorrowedMessage<'_>) -> Record {
        let headers = tickler::kafka::headers_of(message)
            .map(|(name, value)| {
                (
                    String::from_utf8_lossy(name).into_owned(),
                    String::from_utf8_lossy(value.unwrap_or_default()).into_owned(),
                )
            })
            .collect();
        Record {
            partition: message.partition(),
            offset: message.offset(),
            key: message
                .key()
                .map(|k| String::from_utf8_lossy(k).into_owned()),
            payload: message.payload().unwrap_or_default().to_vec(),
            headers,
        }
    }
}

/// `headers` with one more header whose name is the bytes given, UTF-8 or
/// not: what a client that takes names as bytes (librdkafka's C API, Go's
/// sarama) may write. rdkafka's Rust API takes only `&str` names.
pub fn header_raw_add(headers: OwnedHeaders, name: &[u8], value: &[u8]) -> OwnedHeaders {
    // rdkafka's BorrowedHeaders is the native headers' address.
    let native = headers.as_borrowed() as *const rdkafka::message::BorrowedHeaders
        as *mut rdkafka::bindings::rd_kafka_headers_t;
    // SAFETY: `native` is `headers`' own list, alive and not shared here;
    // librdkafka copies the name and the value.
    let added = unsafe {
        rdkafka::bindings::rd_kafka_header_add(
            native,
            name.as_ptr().cast(),
            name.len() as isize,
            value.as_ptr().cast(),
            value.len() as isize,
        )
    };
    assert_eq!(
        added,
        rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
    );
    headers
}

/// Reads records until `n` have arrived or `wait` has passed.
pub async fn records_read(consumer: &StreamConsumer, n: usize, wait: Duration) -> Vec<Record> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut records = Vec::new();
    while records.len() < n {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(message)) => records.push(Record::from_message(&message)),
            Ok(Err(err)) => panic!("kafka consumer error: {err}"),
            Err(_) => break,
        }
    }
    records
}

/// Reads records until `n` distinct keys have arrived or `wait` has passed;
/// returns every record read. For topics where a key may come twice (the
/// ingress's replies: a request read again after a crash is answered
/// again), where [`records_read`] would stop at `n` records and miss keys.
pub async fn records_read_keys(consumer: &StreamConsumer, n: usize, wait: Duration) -> Vec<Record> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut keys = std::collections::HashSet::new();
    let mut records = Vec::new();
    while keys.len() < n {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(message)) => {
                let record = Record::from_message(&message);
                keys.insert(record.key.clone());
                records.push(record);
            }
            Ok(Err(err)) => panic!("kafka consumer error: {err}"),
            Err(_) => break,
        }
    }
    records
}

/// Polls `check` until it returns Some or `wait` passes.
pub async fn eventually<T, F, Fut>(wait: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Drops the database of a test that did not reach `finish` (it panicked),
/// on a runtime of its own: the test's runtime is going away.
impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.running.is_some() {
            scratch_database_drop_blocking(mysql_server_url(), self.db_name.clone());
        }
    }
}

/// Drops database `name` from a thread with its own runtime.
pub fn scratch_database_drop_blocking(server_url: String, name: String) {
    let dropping = std::thread::spawn(move || {
        if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            let _ = runtime.block_on(scratch::scratch_database_drop(&server_url, &name));
        }
    });
    let _ = dropping.join();
}
