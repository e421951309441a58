//! `tickler bench`: measures tickler against the local services and prints
//! one line per figure, with the parameters used. Self-contained: it makes
//! its own database, Redis prefix and topic, runs tickler in-process, and
//! drops the database at the end. Never a test of timings: `--smoke` runs
//! every stage for seconds and checks only that every job arrived.
//!
//! Stages, in order:
//! 1. schedule  — jobs/s accepted through `POST /v1/jobs/batch`, durable in MySQL
//! 2. floor     — the broker's share alone: a bare producer (tickler's
//!    producer settings) sends the same stream, each record at its instant by
//!    a local timer; consumer receive time minus that instant. No scheduler
//!    on this broker can do better end to end.
//!    lateness  — a steady stream; consumer receive time minus schedule time;
//!    then the same stream again beside a job on a missing topic due every
//!    second (fault isolation)
//! 3. burst     — many jobs due at one instant; jobs/s until all consumed and marked
//! 4. results   — reports applied per second from the results topic, each
//!    job `ok` (jobs expecting a result, reported as their records arrive)
//!    ingress   — requests/s from a request topic into MySQL (created,
//!    answered on a reply topic, offsets committed), beside the HTTP batch
//!    API's keyed jobs/s on the same table, in rounds; a last round
//!    without a reply topic
//!    proof     — a steady stream, every record read back by the verifier,
//!    then a fresh reader from the topic's beginning: records the broker
//!    lost, produced again, and every job's record found (#59)
//!    consumed  — a stream read by a group committing every second, which
//!    stops for a minute: each job's `consumed` beside the commit, and the
//!    stalled gauge raised and cleared (#59)
//!    limits    — a topic's limits under a 10-minute outage's backlog:
//!    default_ttl_ms, max_overdue (expire), max_in_flight beside a
//!    responder ([`limits`], #60)
//! 5. redis     — bytes per job, far-future and inside the window (tickler stopped)
//! 6. reconcile — overdue probe and full pass among millions of pending rows;
//!    re-index of a full window after Redis lost it
//! 7. instances — 1, 2, … `instances` `tickler serve` processes on one
//!    database: schedule and burst throughput; then kill -9 of one under a
//!    steady stream, and how soon its shards are served again
//!    ([`instances`])

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use chrono::Utc;
use futures::StreamExt;
use rdkafka::consumer::BaseConsumer;
use rdkafka::Offset;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use tickler::config::Config;
use tickler::domain::job::Status;
use tickler::index::Index;
use tickler::kafka;
use tickler::kafka::tail::header;
use tickler::roles::loader::{Loader, LoaderConfig};
use tickler::roles::reconciler::{Reconciler, ReconcilerConfig};
use tickler::roles::resolver::Resolver;
use tickler::roles::service::Service;
use tickler::store::{scratch, Actor, Store};

mod args;
mod cpu;
mod instances;
mod limits;
mod proof;
mod reference;
mod tenants;

pub use args::BenchArgs;

/// What to run, and how big.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub smoke: bool,
    pub clients: usize,
    /// About how many bytes each job's payload has (0: `{"n": …}` alone).
    pub payload_bytes: usize,
    pub batch: usize,
    pub schedule_secs: u64,
    pub rate: u64,
    pub lateness_secs: u64,
    pub burst: u64,
    pub results: u64,
    /// Request records in the ingress stage.
    pub ingress: u64,
    /// The midnight stage: jobs due at one instant, their window, and the
    /// topic's pace.
    pub midnight: u64,
    pub midnight_window_ms: u64,
    pub midnight_pace: u32,
    /// The tenants stage: the big and the small tenant's jobs, and each
    /// group's pace.
    pub tenants_big: u64,
    pub tenants_small: u64,
    pub tenants_group_pace: u32,
    /// Jobs of the proof stage, at `rate` a second.
    pub proof: u64,
    /// Jobs of each round of the limits stage (an outage's backlog).
    pub limits: u64,
    pub memory_jobs: u64,
    pub far_rows: u64,
    pub window_rows: u64,
    /// Most instances in the instances stage (0 skips it).
    pub instances: usize,
    /// Only the instances stage.
    pub only_instances: bool,
    /// Only these stages (None: all).
    pub stages: Option<Vec<String>>,
    /// An existing database to run in, kept (None: a new one, dropped).
    pub database: Option<String>,
}

/// Rounds of the ingress stage, each the ingress and the batch API on the
/// same table, in turns first (one more follows, without a reply topic).
const INGRESS_ROUNDS: usize = 3;

/// The stages, by the names `--stages` takes.
pub const STAGES: [&str; 15] = [
    "schedule",
    "floor",
    "lateness",
    "isolation",
    "burst",
    "results",
    "ingress",
    "midnight",
    "tenants",
    "proof",
    "consumed",
    "limits",
    "redis",
    "reconcile",
    "instances",
];

impl BenchOptions {
    /// Whether `stage` runs.
    pub fn wants(&self, stage: &str) -> bool {
        if self.only_instances {
            return stage == "instances";
        }
        self.stages
            .as_ref()
            .is_none_or(|stages| stages.iter().any(|s| s == stage))
    }
}

impl BenchOptions {
    /// The full run's parameters (docs/benchmarks.md).
    pub fn full() -> Self {
        BenchOptions {
            smoke: false,
            clients: 8,
            payload_bytes: 0,
            batch: 1000,
            schedule_secs: 10,
            rate: 2000,
            lateness_secs: 30,
            burst: 50_000,
            results: 20_000,
            ingress: 100_000,
            midnight: 200_000,
            midnight_window_ms: 600_000,
            midnight_pace: 1_000,
            tenants_big: 100_000,
            tenants_small: 1_000,
            tenants_group_pace: 10_000,
            proof: 200_000,
            limits: 100_000,
            memory_jobs: 100_000,
            far_rows: 10_000_000,
            window_rows: 1_000_000,
            instances: 3,
            only_instances: false,
            stages: None,
            database: None,
        }
    }

    /// Seconds-long, for CI: proves every stage works and every job arrives.
    pub fn smoke() -> Self {
        BenchOptions {
            smoke: true,
            clients: 2,
            payload_bytes: 0,
            batch: 200,
            schedule_secs: 1,
            rate: 200,
            lateness_secs: 2,
            burst: 1000,
            results: 500,
            ingress: 1000,
            midnight: 2_000,
            midnight_window_ms: 5_000,
            midnight_pace: 1_000,
            tenants_big: 2_000,
            tenants_small: 100,
            tenants_group_pace: 1_000,
            proof: 1_000,
            limits: 500,
            memory_jobs: 1000,
            far_rows: 20_000,
            window_rows: 5_000,
            instances: 2,
            only_instances: false,
            stages: None,
            database: None,
        }
    }
}

/// A record as the bench's consumer saw it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    received_at_ms: i64,
    scheduled_at_ms: i64,
    dispatched_at_ms: i64,
}

type Records = Arc<Mutex<HashMap<u64, Seen>>>;

struct Bench {
    options: BenchOptions,
    config: Config,
    /// The topic of the stage running (each stage that produces has its own:
    /// tansu's memory storage answers fetches of a partition more slowly
    /// the more batches it holds, so a stage must not inherit another's).
    topic: Mutex<String>,
    /// The consumer of each stage's topic stops with this.
    stop_consumers: CancellationToken,
    http: reqwest::Client,
    /// The APIs to spread requests over (one per instance).
    base_urls: Vec<String>,
    /// Round robin over `base_urls`.
    next: std::sync::atomic::AtomicUsize,
    records: Records,
}

/// Runs every stage; Err if a stage failed or a job did not arrive.
pub async fn run(base: &Config, options: BenchOptions) -> anyhow::Result<()> {
    let server_url = base
        .mysql
        .url
        .rsplit_once('/')
        .map(|(server, _)| server.to_owned())
        .context("mysql.url has no database part")?;
    let suffix = format!("{:08x}", rand::random::<u32>());
    // Every stage but the last (instances) runs in this process.
    if !STAGES[..STAGES.len() - 1]
        .iter()
        .any(|stage| options.wants(stage))
    {
        return instances::run(base, &options, &server_url, &suffix).await;
    }
    if let Some(name) = &options.database {
        let mysql_url = format!("{server_url}/{name}");
        Store::migrate(&mysql_url).await?;
        run_in(base, options.clone(), &mysql_url, &suffix).await?;
        return instances::run(base, &options, &server_url, &suffix).await;
    }
    let db_name = format!("tickler_bench_{suffix}");
    let mysql_url =
        scratch::scratch_database_create(&server_url, &db_name, base.mysql.history_hand_edits)
            .await?;
    let result = run_in(base, options.clone(), &mysql_url, &suffix).await;
    scratch::scratch_database_drop(&server_url, &db_name).await?;
    result?;
    instances::run(base, &options, &server_url, &suffix).await
}

/// Long because it is the benchmark's script: the stages in order, each a
/// call, with the deployment each needs around it.
async fn run_in(
    base: &Config,
    options: BenchOptions,
    mysql_url: &str,
    suffix: &str,
) -> anyhow::Result<()> {
    let mut config = base.clone();
    config.mysql.url = mysql_url.to_owned();
    config.redis.prefix = format!("tickler-bench-{suffix}");
    config.api.addr = "127.0.0.1:0".to_owned();
    config.results.topic = format!("tickler-bench-results-{suffix}");
    config.results.group = format!("tickler-bench-{suffix}");
    // The isolation stage schedules jobs on a topic the broker lacks.
    config.kafka.topic_check = tickler::config::TopicCheck::Warn;
    // Its own tickler on loopback, measured without the per-token
    // limits (a token check costs a hash and a map lookup).
    config.api.auth = tickler::config::AuthMode::None;
    config.api.rate_requests = 0;
    config.api.rate_jobs = 0;
    let topic = format!("tickler-bench-{suffix}");
    kafka::topic_ensure(&config.kafka.brokers, &topic, 4).await?;
    // The consumed stage's topic is read by a group tickler follows.
    let consumed_topic = format!("{topic}.consumed");
    config.topics.insert(
        consumed_topic.clone(),
        tickler::config::TopicConfig {
            consumer_groups: Some(vec![proof::readers_group(&consumed_topic)]),
            consumed_within_ms: Some(proof::CONSUMED_WITHIN_MS),
            ..Default::default()
        },
    );
    // The limits stage's topics, one round each; only when it runs: a
    // topic with a max_in_flight makes the dispatcher read the topic of
    // every claimed job (docs/configuration.md), which the other stages
    // measure without.
    if options.wants("limits") {
        let limited = |round: &str| format!("{topic}.{round}");
        config.topics.insert(
            limited("ttl"),
            tickler::config::TopicConfig {
                default_ttl_ms: Some(limits::TTL_MS),
                ..Default::default()
            },
        );
        config.topics.insert(
            limited("overdue"),
            tickler::config::TopicConfig {
                max_overdue: Some(limits::overdue_cap(options.limits)),
                overdue_policy: Some(tickler::config::OverduePolicy::Expire),
                overdue_after_ms: Some(limits::OVERDUE_AFTER_MS),
                ..Default::default()
            },
        );
        config.topics.insert(
            limited("inflight"),
            tickler::config::TopicConfig {
                max_in_flight: Some(limits::in_flight_cap(options.limits)),
                ..Default::default()
            },
        );
    }
    println!(
        "bench: {} mode; mysql {}, redis prefix {}, topic {topic} (4 partitions), shards {}",
        if options.smoke { "smoke" } else { "full" },
        // Never the password.
        tickler::index::url_redacted(mysql_url),
        config.redis.prefix,
        config.cluster.shards
    );

    // The machine's own figures, beside which every figure below reads.
    let (model, cores) = reference::cpu();
    let (statements, records) = if options.smoke {
        (5, 5_000)
    } else {
        (100, 100_000)
    };
    let (inserted, updated) = reference::database(mysql_url, statements).await?;
    let reference_topic = format!("tickler-bench-{suffix}.reference");
    kafka::topic_ensure(&config.kafka.brokers, &reference_topic, 4).await?;
    let produced = reference::producer(&config, &reference_topic, records).await?;
    println!(
        "reference: {model}, {cores} cores; MariaDB alone: {inserted:.0} rows/s by 1000-row INSERTs, {updated:.0} rows/s by 1000-row UPDATEs by id; the producer alone: {produced:.0} records/s (200 bytes)"
    );

    let cancel = CancellationToken::new();
    let starting = Instant::now();
    let running = tickler::app::start(config.clone(), cancel.clone()).await?;
    println!(
        "start: tickler started in {:.0} ms (migrations checked, every role running, the API listening)",
        starting.elapsed().as_secs_f64() * 1000.0
    );
    let addr = running.http_addr.context("the bench runs the api role")?;
    let records: Records = Arc::new(Mutex::new(HashMap::new()));
    let stop_consumer = CancellationToken::new();

    let bench = Bench {
        options,
        config: config.clone(),
        topic: Mutex::new(topic),
        stop_consumers: stop_consumer.clone(),
        http: reqwest::Client::new(),
        base_urls: vec![format!("http://{addr}")],
        next: Default::default(),
        records,
    };
    let outcome = async {
        let wants = |stage| bench.options.wants(stage);
        if wants("schedule") {
            bench.schedule().await?;
        }
        if wants("floor") {
            bench.floor().await?;
        }
        if wants("lateness") {
            bench.stage_topic("lateness").await?;
            bench.lateness(None).await?;
        }
        if wants("isolation") {
            bench.stage_topic("isolation").await?;
            bench
                .lateness(Some(&format!("tickler-bench-missing-{suffix}")))
                .await?;
        }
        if wants("burst") {
            bench.stage_topic("burst").await?;
            bench.burst(&running.store).await?;
        }
        if wants("results") {
            bench.stage_topic("results").await?;
            bench.results(&running.store).await?;
        }
        if wants("ingress") {
            bench.stage_topic("ingress").await?;
            bench.ingress(&running.store, &running.index).await?;
        }
        if wants("midnight") {
            bench.stage_topic("midnight").await?;
            bench.midnight().await?;
        }
        if wants("tenants") {
            bench.stage_topic("tenants").await?;
            bench.tenants().await?;
        }
        if wants("proof") {
            bench.stage_topic("proof").await?;
            bench.proof(&running.store).await?;
        }
        if wants("consumed") {
            bench.stage_topic("consumed").await?;
            bench.consumed(&running.store).await?;
        }
        if wants("limits") {
            bench.limits(&running.store).await?;
        }
        anyhow::Ok(())
    }
    .await;
    stop_consumer.cancel();
    running.shutdown().await;
    outcome?;

    // The remaining stages drive the components directly, tickler stopped,
    // so nothing else touches the rows and keys they measure.
    let store = Store::connect_lazy(
        &config.mysql.url,
        tickler::roles::ingress::CONNECTIONS.max(4),
        Actor::Bench,
    )?;
    let index = Index::connect(
        &config.redis.url,
        &config.redis.prefix,
        config.cluster.shards,
    )
    .await?;
    // Memory first, on an empty index; its window jobs are due 5 to 9
    // minutes out, so none is overdue during the reconcile stage.
    if bench.options.wants("redis") {
        bench.redis_memory(&store, &index).await?;
    }
    if bench.options.wants("reconcile") {
        bench.reconcile(&store, &index).await?;
    }
    index.clear().await?;
    store.close().await;
    Ok(())
}

impl Bench {
    /// The topic of the stage running.
    fn topic(&self) -> String {
        self.topic.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Makes `<topic>-<stage>` (4 partitions), starts reading it, and makes
    /// it the topic of the jobs created from now on. Returns its name.
    async fn stage_topic(&self, stage: &str) -> anyhow::Result<String> {
        let base = self.topic();
        let base = base
            .rsplit_once('.')
            .map_or(base.as_str(), |(b, _)| b)
            .to_owned();
        let topic = format!("{base}.{stage}");
        kafka::topic_ensure(&self.config.kafka.brokers, &topic, 4).await?;
        let consumer = kafka::tail::base_consumer_assigned(
            &self.config.kafka.brokers,
            &topic,
            Offset::Beginning,
        )?;
        record(consumer, self.records.clone(), self.stop_consumers.clone());
        *self.topic.lock().unwrap_or_else(|p| p.into_inner()) = topic.clone();
        Ok(topic)
    }

    /// The next API, round robin.
    fn base_url(&self) -> &str {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        &self.base_urls[n % self.base_urls.len()]
    }

    async fn batch_post(&self, jobs: Vec<Value>) -> anyhow::Result<()> {
        let n = jobs.len();
        let response = self
            .http
            .post(format!("{}/v1/jobs/batch", self.base_url()))
            .json(&json!({ "jobs": jobs }))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("batch refused: {}", response.text().await?);
        }
        let body: Value = response.json().await?;
        let created = body["results"]
            .as_array()
            .map(|r| r.iter().filter(|x| x["result"] == "created").count())
            .unwrap_or(0);
        if created != n {
            bail!("batch created {created} of {n}: {body}");
        }
        Ok(())
    }

    fn job(&self, run_at: chrono::DateTime<Utc>, n: u64) -> Value {
        let payload = match self.options.payload_bytes {
            0 => json!({"n": n}),
            // `{"n":…,"pad":"…"}`: the padding makes up the rest.
            bytes => json!({"n": n, "pad": "x".repeat(bytes.saturating_sub(30))}),
        };
        json!({"topic": self.topic(), "payload": payload, "run_at": run_at.to_rfc3339()})
    }

    /// Stage 1: clients post batches of far-future jobs for a while.
    async fn schedule(&self) -> anyhow::Result<()> {
        let far = Utc::now() + chrono::Duration::days(30);
        let deadline = Instant::now() + Duration::from_secs(self.options.schedule_secs);
        let started = Instant::now();
        let cpu_before = cpu::by_process();
        let total = Arc::new(Mutex::new(0u64));
        let workers = (0..self.options.clients).map(|client| {
            let total = total.clone();
            async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let jobs: Vec<Value> = (0..self.options.batch as u64)
                        .map(|i| self.job(far, client as u64 * 1_000_000_000 + n + i))
                        .collect();
                    self.batch_post(jobs).await?;
                    n += self.options.batch as u64;
                }
                *total.lock().unwrap_or_else(|p| p.into_inner()) += n;
                anyhow::Ok(())
            }
        });
        for result in futures::future::join_all(workers).await {
            result?;
        }
        let seconds = started.elapsed().as_secs_f64();
        let cpu_spent = cpu::spent_since(&cpu_before);
        let total = *total.lock().unwrap_or_else(|p| p.into_inner());
        println!(
            "schedule: {:.0} jobs/s accepted ({total} jobs in {seconds:.1} s; batch API, {} clients, {} jobs per request, durable in MySQL)",
            total as f64 / seconds,
            self.options.clients,
            self.options.batch
        );
        println!(
            "schedule: CPU seconds ({seconds:.1} s of wall time, {} cores): {cpu_spent}{}",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu::database_per_job(&cpu_before, total)
        );
        Ok(())
    }

    /// Stage 2: `rate` jobs/s due evenly over `lateness_secs`, each second's
    /// jobs created two seconds ahead; lateness at the consumer. With
    /// `missing`, a job on that topic (which the broker does not have) is
    /// due at the start of every second too: the healthy jobs' lateness
    /// must not change.
    ///
    /// Long because the stage is one measurement read in order: schedule at a
    /// steady rate, consume what arrives, then print the percentiles.
    async fn lateness(&self, missing: Option<&str>) -> anyhow::Result<()> {
        let rate = self.options.rate;
        let secs = self.options.lateness_secs;
        let stages = stages_now();
        let start = Utc::now() + chrono::Duration::seconds(2);
        let step_us = 1_000_000 / rate as i64;
        let mut ids = Vec::new();
        // The topic's due-time watermark behind the clock, every 200 ms
        // while its jobs flow (from their first due time).
        let sampling = tokio_util::sync::CancellationToken::new();
        let sampler = {
            let (http, url, stop) = (
                self.http.clone(),
                format!("{}/v1/topics/{}", self.base_url(), self.topic()),
                sampling.clone(),
            );
            tokio::spawn(async move {
                let mut lags: Vec<i64> = Vec::new();
                while !stop.is_cancelled() {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if Utc::now() < start + chrono::Duration::seconds(3) {
                        continue;
                    }
                    let Ok(response) = http.get(&url).send().await else {
                        continue;
                    };
                    let Ok(view) = response.json::<Value>().await else {
                        continue;
                    };
                    if let Some(mark) = view["watermark"]
                        .as_str()
                        .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                    {
                        lags.push((Utc::now() - mark.with_timezone(&Utc)).num_milliseconds());
                    }
                }
                lags
            })
        };
        for second in 0..secs {
            let at = start + chrono::Duration::seconds(second as i64 - 2);
            if let Ok(wait) = (at - Utc::now()).to_std() {
                tokio::time::sleep(wait).await;
            }
            let jobs: Vec<Value> = (0..rate)
                .map(|i| {
                    let due = start
                        + chrono::Duration::seconds(second as i64)
                        + chrono::Duration::microseconds(step_us * i as i64);
                    self.job(due, second * rate + i)
                })
                .collect();
            ids.extend(self.batches_created(jobs).await?);
            if let Some(missing) = missing {
                let due = start + chrono::Duration::seconds(second as i64);
                let body = json!({"topic": missing, "payload": second, "run_at": due.to_rfc3339()});
                let response = self
                    .http
                    .post(format!("{}/v1/jobs", self.base_url()))
                    .json(&body)
                    .send()
                    .await?;
                if !response.status().is_success() {
                    bail!(
                        "job on the missing topic refused: {}",
                        response.text().await?
                    );
                }
            }
        }
        let wait = Duration::from_secs(secs + 30);
        let seen = self.await_records(&ids, wait).await;
        sampling.cancel();
        let mut watermark_lag = sampler.await.unwrap_or_default();
        let mut end_to_end: Vec<i64> = seen
            .iter()
            .map(|s| s.received_at_ms - s.scheduled_at_ms)
            .collect();
        let mut dispatch: Vec<i64> = seen
            .iter()
            .map(|s| s.dispatched_at_ms - s.scheduled_at_ms)
            .collect();
        let stage = if missing.is_some() {
            "lateness beside a missing topic"
        } else {
            "lateness"
        };
        let beside = if missing.is_some() {
            "; plus one job a second on a topic the broker does not have"
        } else {
            ""
        };
        println!(
            "{stage}: end to end {} (consumer receive minus schedule_time; {rate} jobs/s for {secs} s, {} jobs, consumer fetch.wait.max.ms 5{beside})",
            percentiles(&mut end_to_end),
            ids.len()
        );
        println!(
            "{stage}: at dispatch {} (tickler-dispatched-at minus schedule_time)",
            percentiles(&mut dispatch)
        );
        println!(
            "{stage}: the topic's due-time watermark behind the clock {} ({} samples, every 200 ms; reconciler.watermark_settle_ms {}, watermark_interval_ms {})",
            percentiles(&mut watermark_lag),
            watermark_lag.len(),
            self.config.reconciler.watermark_settle_ms,
            self.config.reconciler.watermark_interval_ms
        );
        println!(
            "{stage}: dispatcher stages, mean per pass (claim, cas), per job (hold: claimed this far ahead), per group of records (ack: sent to acknowledged), per settle (mark): {}",
            stages_since(&stages)
        );
        if seen.len() != ids.len() {
            bail!("lateness: {} of {} jobs arrived", seen.len(), ids.len());
        }
        Ok(())
    }

    /// The broker's floor: `rate` records/s for `lateness_secs`, each sent
    /// by a bare producer at its instant (local timer, no tickler), with
    /// the headers the consumer reads; lateness at the same consumer.
    async fn floor(&self) -> anyhow::Result<()> {
        let rate = self.options.rate;
        let secs = self.options.lateness_secs;
        let topic = self.stage_topic("floor").await?;
        let producer = kafka::Producer::create(
            &self.config.kafka.brokers,
            &self.config.kafka.options,
            self.config.kafka.linger_ms,
            self.config.kafka.message_timeout_ms,
        )?;
        // Warm: the first send waits for the connection and the idempotent
        // producer's id, as tickler's long-lived producer never does.
        let warm = producer
            .send(kafka::Record::to(&topic, 0).key(b"warm-up").value(b"{}"))?
            .await;
        if let Err(err) = warm {
            bail!("floor: warm-up record not produced: {err}");
        }
        let start = Utc::now() + chrono::Duration::milliseconds(500);
        let step_us = 1_000_000 / rate as i64;
        // Ids far above any job's, so they never meet the jobs' records.
        let base = 1u64 << 62;
        let total = rate * secs;
        let mut deliveries = Vec::with_capacity(total as usize);
        for n in 0..total {
            let due = start + chrono::Duration::microseconds(step_us * n as i64);
            if let Ok(wait) = (due - Utc::now()).to_std() {
                tokio::time::sleep(wait).await;
            }
            let id = (base + n).to_string();
            let scheduled = due.timestamp_millis().to_string();
            let record = kafka::Record::to(&topic, 3)
                .key(id.as_bytes())
                .value(b"{}")
                .header(tickler::domain::job::HEADER_JOB_ID, id.as_bytes())
                .header(
                    tickler::domain::job::HEADER_SCHEDULED_AT,
                    scheduled.as_bytes(),
                )
                .header(
                    tickler::domain::job::HEADER_DISPATCHED_AT,
                    scheduled.as_bytes(),
                );
            match producer.send(record) {
                Ok(delivery) => deliveries.push(delivery),
                Err(err) => bail!("floor: send failed: {err}"),
            }
        }
        for delivery in deliveries {
            if delivery.await.is_err() {
                bail!("floor: a record was not acknowledged");
            }
        }
        let ids: Vec<u64> = (0..total).map(|n| base + n).collect();
        let seen = self.await_records(&ids, Duration::from_secs(30)).await;
        let mut end_to_end: Vec<i64> = seen
            .iter()
            .map(|s| s.received_at_ms - s.scheduled_at_ms)
            .collect();
        println!(
            "floor: end to end {} (a bare producer, linger.ms {}, sending each record at its instant by a local timer; consumer receive minus that instant; {rate} records/s for {secs} s, consumer fetch.wait.max.ms 5)",
            percentiles(&mut end_to_end),
            self.config.kafka.linger_ms
        );
        if seen.len() != ids.len() {
            bail!("floor: {} of {} records arrived", seen.len(), ids.len());
        }
        Ok(())
    }

    /// Creates jobs through the batch API and returns their ids.
    async fn batches_created(&self, jobs: Vec<Value>) -> anyhow::Result<Vec<u64>> {
        let chunks: Vec<Vec<Value>> = jobs
            .chunks(self.options.batch)
            .map(|c| c.to_vec())
            .collect();
        let mut ids = Vec::new();
        let mut posts = futures::stream::iter(chunks)
            .map(|chunk| async move {
                let response = self
                    .http
                    .post(format!("{}/v1/jobs/batch", self.base_url()))
                    .json(&json!({ "jobs": chunk }))
                    .send()
                    .await?;
                let body: Value = response.json().await?;
                let ids: Vec<u64> = body["results"]
                    .as_array()
                    .context("batch answer has results")?
                    .iter()
                    .filter_map(|r| r["id"].as_u64())
                    .collect();
                anyhow::Ok(ids)
            })
            .buffer_unordered(self.options.clients);
        while let Some(result) = posts.next().await {
            ids.extend(result?);
        }
        Ok(ids)
    }

    /// Stage 3: `burst` jobs due at one instant.
    async fn burst(&self, store: &Store) -> anyhow::Result<()> {
        let n = self.options.burst;
        let lead = if self.options.smoke { 3 } else { 12 };
        let due = Utc::now() + chrono::Duration::seconds(lead);
        let jobs: Vec<Value> = (0..n).map(|i| self.job(due, i)).collect();
        let ids = self.batches_created(jobs).await?;
        let marked_before = store.job_count(&self.topic(), Status::Dispatched).await?;
        if Utc::now() >= due {
            bail!("burst: creating {n} jobs took longer than the {lead} s lead");
        }
        until(due).await;
        let stages = stages_now();
        let marked_metric = dispatched_total();
        let cpu_before = cpu::by_process();
        let started = Instant::now();
        let seen = self.await_records(&ids, Duration::from_secs(120)).await;
        let consumed = started.elapsed();
        // Then every row marked: first by this process's count of jobs
        // marked, which costs the database nothing (#61: polling MariaDB
        // for it every 20 ms was about 5 µs of its CPU a job, counted as
        // tickler's), then confirmed from the rows: whether any of the
        // burst's is left to mark, a few thousand ids at a time (rows only
        // go from unsent to sent: a slice found all sent stays so). Not by
        // whether any row of the topic is unsent: the schedule stage's
        // jobs, due weeks ahead, share the topic.
        let deadline = Instant::now() + Duration::from_secs(60);
        while dispatched_total() - marked_metric < n as f64 && Instant::now() < deadline {
            // As often as the rows were polled: the render is tickler's
            // CPU, counted in the figures below.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut unsent = ids.chunks(5_000).peekable();
        while let Some(slice) = unsent.peek() {
            if Instant::now() >= deadline {
                break;
            }
            if store.jobs_any_unsent_of(slice).await? {
                tokio::time::sleep(Duration::from_millis(20)).await;
            } else {
                unsent.next();
            }
        }
        let drained = started.elapsed();
        let cpu_spent = cpu::spent_since(&cpu_before);
        let marked = store.job_count(&self.topic(), Status::Dispatched).await? - marked_before;
        println!(
            "burst: {n} jobs due at one instant: all consumed from Kafka after {:.2} s, rows marked after {:.2} s: {:.0} jobs/s",
            consumed.as_secs_f64(),
            drained.as_secs_f64(),
            n as f64 / drained.as_secs_f64()
        );
        println!(
            "burst: CPU seconds while draining ({:.2} s of wall time, {} cores): {}{}",
            drained.as_secs_f64(),
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_spent,
            cpu::database_per_job(&cpu_before, n)
        );
        println!("burst: dispatcher stages, mean: {}", stages_since(&stages));
        if seen.len() as u64 != n || marked as u64 != n {
            bail!("burst: {} of {n} jobs arrived, {marked} marked", seen.len());
        }
        // What `mysql.history_hand_edits = observe` costs: a pass over the
        // rows the burst changed, each read beside its history; then the
        // next pass, which reads them again in its overlap.
        let mut checked = tickler::store::HandEditsChecked::default();
        for pass in ["first", "next"] {
            let observed = Instant::now();
            let recorded = store
                .hand_edits_observe(
                    due - chrono::Duration::seconds(1),
                    Utc::now() + chrono::Duration::minutes(1),
                    &mut checked,
                )
                .await?;
            let observed = observed.elapsed();
            println!(
                "burst: a hand-edit pass (history_hand_edits = observe), the {pass}, over the {n} rows the burst changed: {:.0} ms, {:.1} µs a row, {recorded} recorded",
                observed.as_secs_f64() * 1000.0,
                observed.as_secs_f64() * 1e6 / n.max(1) as f64
            );
        }
        Ok(())
    }

    /// Stage: `ingress` request records for far-future jobs, produced to a
    /// request topic beforehand; then an ingress (as the role runs it:
    /// batches of `ingress.batch`, replies awaited, offsets committed)
    /// takes them into MySQL. Figure: requests per second from the first
    /// pass to the last row written, to compare with the schedule stage's.
    async fn ingress(&self, store: &Store, index: &Index) -> anyhow::Result<()> {
        let target = self.topic();
        let far = tickler::domain::job::time_format(Utc::now() + chrono::Duration::days(30));
        // Rounds, the API first in every other one: the second of two runs
        // on the same table meets what the first left (pages to flush, a
        // bigger index), so neither path always pays it.
        let mut ratios = Vec::with_capacity(INGRESS_ROUNDS);
        // The last round without a reply topic (it is optional): what
        // answering every request costs.
        for round in 0..=INGRESS_ROUNDS {
            let replies = round < INGRESS_ROUNDS;
            let api_first = round % 2 == 1;
            let mut ingress_rate = 0.0;
            let mut api_rate = 0.0;
            for api_now in [api_first, !api_first] {
                if api_now {
                    api_rate = self.ingress_beside(round, &target, &far).await?;
                } else {
                    ingress_rate = self
                        .ingress_round(round, store, index, &target, &far, replies)
                        .await?;
                }
            }
            let ratio = ingress_rate / api_rate.max(1.0);
            if replies {
                ratios.push(ratio);
            }
            println!(
                "ingress: round {}: ingress {ingress_rate:.0} requests/s{}, batch API {api_rate:.0} jobs/s ({} first): {ratio:.2}",
                round + 1,
                if replies { "" } else { " without a reply topic" },
                if api_first { "API" } else { "ingress" },
            );
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "ingress: ingress / batch API, median of {INGRESS_ROUNDS} rounds: {:.2} (rounds: {})",
            ratios[ratios.len() / 2],
            ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(())
    }

    /// One round of the ingress stage: an ingress of its own, on request
    /// and reply topics of their own (tansu's memory storage slows as a
    /// topic grows), joined to its group with one request first; then the
    /// round's requests produced and taken into MySQL. Returns requests
    /// per second.
    ///
    /// Long because a round is one measurement read in order: produce the
    /// requests, start the ingress, wait for every answer, then print the
    /// figures.
    async fn ingress_round(
        &self,
        round: usize,
        store: &Store,
        index: &Index,
        target: &str,
        far: &str,
        replies: bool,
    ) -> anyhow::Result<f64> {
        use tickler::roles::ingress::{Ingress, IngressConfig};

        let requests = format!("{target}-requests-{round}");
        let replies = replies.then(|| format!("{target}-replies-{round}"));
        for topic in std::iter::once(&requests).chain(&replies) {
            kafka::topic_ensure(&self.config.kafka.brokers, topic, 4).await?;
        }
        let answering = if replies.is_some() {
            "answered on a reply topic"
        } else {
            "no reply topic"
        };
        let producer = kafka::Producer::create(
            &self.config.kafka.brokers,
            &self.config.kafka.options,
            5,
            60_000,
        )?;
        let mut config = self.config.clone();
        config.ingress.topics.insert(
            requests.clone(),
            tickler::config::IngressTopic {
                targets: vec![target.to_owned()],
            },
        );
        config.ingress.reply_topic = replies;
        config.ingress.group = format!("{requests}-group");
        let ingress = Ingress::new(
            store.clone(),
            index.clone(),
            Arc::new(Notify::new()),
            kafka::Topics::new(
                &config.kafka.brokers,
                &config.kafka.options,
                Duration::from_millis(config.kafka.topic_refresh_ms),
            ),
            &config,
            IngressConfig::from_config(&config),
        )?;
        ingress.connect_alone().await?;
        let cancel = CancellationToken::new();
        fn request<'a>(
            requests: &'a str,
            target: &str,
            far: &str,
            key: &'a str,
            payload: &'a str,
        ) -> kafka::Record<'a> {
            kafka::Record::to(requests, 2)
                .key(key.as_bytes())
                .value(payload.as_bytes())
                .header(
                    tickler::roles::ingress::HEADER_TARGET_TOPIC,
                    target.as_bytes(),
                )
                .header(tickler::roles::ingress::HEADER_RUN_AT, far.as_bytes())
        }
        // One request first, taken before the others are produced: the
        // consumer's first fetch is not the ingress's pace.
        let key = format!("warm-up-{round}");
        producer
            .send(request(&requests, target, far, &key, "{}"))?
            .await
            .map_err(|err| anyhow::anyhow!("ingress: the warm-up request: {err}"))?;
        let joined = Instant::now() + Duration::from_secs(60);
        loop {
            match tokio::time::timeout(Duration::from_secs(30), ingress.run_once(&cancel)).await {
                Ok(Some(report)) if report.records > 0 => break,
                _ if Instant::now() > joined => bail!("ingress: the warm-up request was not taken"),
                _ => {}
            }
        }

        let n = self.options.ingress;
        let produced = Instant::now();
        let mut deliveries = Vec::with_capacity(n as usize);
        for i in 0..n {
            let key = format!("request-{round}-{i}");
            let payload = format!("{{\"n\":{i}}}");
            loop {
                match producer.send(request(&requests, target, far, &key, &payload)) {
                    Ok(delivery) => {
                        deliveries.push(delivery);
                        break;
                    }
                    // The producer's queue is full: let it drain.
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        }
        for delivery in deliveries {
            if delivery.await.is_err() {
                bail!("ingress: a request was not produced");
            }
        }
        println!(
            "ingress: {n} requests produced to {requests} in {:.1} s (4 partitions)",
            produced.elapsed().as_secs_f64()
        );

        let waited = cpu::database_quiet(Duration::from_secs(60)).await;
        println!(
            "ingress: waited {:.1} s for the database to go quiet (what the stages before left to do)",
            waited.as_secs_f64()
        );
        let (mut taken, mut created, mut passes) = (0u64, 0u64, 0u64);
        let mut took = [Duration::ZERO; 3];
        let started = Instant::now();
        let cpu_before = cpu::by_process();
        let deadline = Instant::now() + Duration::from_secs(300);
        while taken < n && Instant::now() < deadline {
            let Ok(Some(report)) =
                tokio::time::timeout(Duration::from_secs(30), ingress.run_once(&cancel)).await
            else {
                break;
            };
            passes += u64::from(report.records > 0);
            took[0] += report.took_take;
            took[1] += report.took_write;
            took[2] += report.took_reply;
            taken += report.records as u64;
            created += report.outcomes.get("created").copied().unwrap_or(0) as u64;
        }
        // Until the last pass is answered and committed too.
        let answered = Instant::now();
        ingress.settle().await;
        took[2] += answered.elapsed();
        let spent = started.elapsed();
        let rate = taken as f64 / spent.as_secs_f64().max(0.001);
        println!(
            "ingress: {rate:.0} requests/s into MySQL ({created} jobs created from {taken} requests in {:.2} s, {passes} passes of up to {}; {answering}, offsets committed)",
            spent.as_secs_f64(),
            self.config.ingress.batch
        );
        println!(
            "ingress: where the passes' time went: reading {:.2} s, writing {:.2} s, waiting for replies and commits {:.2} s (a pass is read while the one before is written and the one before that answered: the writes overlap, so they add up to more than the wall time)",
            took[0].as_secs_f64(),
            took[1].as_secs_f64(),
            took[2].as_secs_f64()
        );
        println!(
            "ingress: CPU seconds meanwhile: {}",
            cpu::spent_since(&cpu_before)
        );
        if created != n {
            bail!("ingress: {created} of {n} requests created a job");
        }
        Ok(rate)
    }

    /// The API's batch path on the ingress stage's table, with keys too
    /// (the schedule stage's jobs have none, and a key's unique check
    /// costs). Returns jobs per second.
    async fn ingress_beside(&self, round: usize, target: &str, far: &str) -> anyhow::Result<f64> {
        let n = self.options.ingress;
        cpu::database_quiet(Duration::from_secs(60)).await;
        let jobs: Vec<Value> = (0..n)
            .map(|i| {
                json!({"topic": target, "key": format!("http-{round}-{}", (i * 7919) % n), "payload": {"n": i}, "run_at": far})
            })
            .collect();
        let cpu_before = cpu::by_process();
        let started = Instant::now();
        let ids = self.batches_created(jobs).await?;
        let spent = started.elapsed();
        let rate = ids.len() as f64 / spent.as_secs_f64().max(0.001);
        println!(
            "ingress: beside it, the batch API on the same table: {rate:.0} jobs/s ({} keyed jobs in {:.2} s, {} clients, {} jobs per request); CPU seconds: {}",
            ids.len(),
            spent.as_secs_f64(),
            self.options.clients,
            self.options.batch,
            cpu::spent_since(&cpu_before)
        );
        if ids.len() as u64 != n {
            bail!("ingress: the batch API created {} of {n} jobs", ids.len());
        }
        Ok(rate)
    }

    /// Stage 4: jobs expecting a result, all due at once; once their records
    /// are consumed, an `ok` for each is produced to the results topic (as
    /// fast as the producer goes, keyed by job id). Figure: reports applied
    /// per second, from the first report sent to the last job `succeeded`.
    async fn results(&self, store: &Store) -> anyhow::Result<()> {
        let n = self.options.results;
        let due = Utc::now() + chrono::Duration::seconds(2);
        let jobs: Vec<Value> = (0..n)
            .map(|i| {
                let mut job = self.job(due, i);
                job["expects_result"] = json!(true);
                job
            })
            .collect();
        let ids = self.batches_created(jobs).await?;
        let seen = self.await_records(&ids, Duration::from_secs(120)).await;
        if seen.len() != ids.len() {
            bail!("results: {} of {n} jobs arrived", seen.len());
        }
        let producer = kafka::Producer::create(
            &self.config.kafka.brokers,
            &self.config.kafka.options,
            5,
            30_000,
        )?;
        let started = Instant::now();
        let sends = ids.iter().map(|id| {
            let key = id.to_string();
            let report = json!({"job_id": id, "attempt": 1, "outcome": "ok"}).to_string();
            let producer = &producer;
            async move {
                let record = || {
                    kafka::Record::to(&self.config.results.topic, 0)
                        .key(key.as_bytes())
                        .value(report.as_bytes())
                };
                let delivery = loop {
                    match producer.send(record()) {
                        Ok(delivery) => break delivery,
                        // The producer's queue is full: let it drain.
                        Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                };
                delivery
                    .await
                    .map_err(|err| anyhow::anyhow!("report not produced: {err}"))
            }
        });
        for sent in futures::future::join_all(sends).await {
            sent?;
        }
        let produced = started.elapsed();
        let deadline = Instant::now() + Duration::from_secs(120);
        let succeeded = loop {
            let done = store.job_count(&self.topic(), Status::Succeeded).await?;
            if done as u64 >= n || Instant::now() >= deadline {
                break done;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let applied = started.elapsed();
        println!(
            "results: {n} reports applied in {:.2} s: {:.0} reports/s (all produced after {:.2} s; results topic {} partitions, one consumer, batches up to {})",
            applied.as_secs_f64(),
            n as f64 / applied.as_secs_f64(),
            produced.as_secs_f64(),
            self.config.results.topic_partitions,
            self.config.results.batch
        );
        if succeeded as u64 != n {
            bail!("results: {succeeded} of {n} jobs succeeded");
        }
        Ok(())
    }

    /// Waits until every id has been seen or `wait` passes; returns what
    /// was seen of them.
    async fn await_records(&self, ids: &[u64], wait: Duration) -> Vec<Seen> {
        let deadline = Instant::now() + wait;
        loop {
            let seen: Vec<Seen> = {
                let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
                ids.iter()
                    .filter_map(|id| records.get(id).copied())
                    .collect()
            };
            if seen.len() == ids.len() || Instant::now() >= deadline {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stage 5: Redis memory per job, far-future and inside the window,
    /// indexed by a loader pass.
    async fn redis_memory(&self, store: &Store, index: &Index) -> anyhow::Result<()> {
        // Each measurement is a full loader pass (as after a start), from a
        // cleared prefix, so only the seeded jobs can change the memory.
        index.clear().await?;
        let n = self.options.memory_jobs;
        let now = store.db_now().await?;
        self.loader(store, index).run_once(now).await?;
        let before = index.memory_used().await?;
        let far_topic = format!("{}-far", self.topic());
        store
            .job_seed(
                &far_topic,
                n,
                now + chrono::Duration::days(30),
                Duration::from_secs(3600),
            )
            .await?;
        self.loader(store, index)
            .run_once(store.db_now().await?)
            .await?;
        let after_far = index.memory_used().await?;
        let near_topic = format!("{}-near", self.topic());
        store
            .job_seed(
                &near_topic,
                n,
                now + chrono::Duration::minutes(5),
                Duration::from_secs(240),
            )
            .await?;
        let report = self
            .loader(store, index)
            .run_once(store.db_now().await?)
            .await?;
        let after_near = index.memory_used().await?;
        let per_job = |delta: u64| delta as f64 / n as f64;
        println!(
            "redis: {:.1} bytes/job for jobs due in 30 days; {:.1} bytes/job inside the window ({n} jobs each, used_memory delta; {} shards; {} indexed)",
            per_job(after_far.saturating_sub(before)),
            per_job(after_near.saturating_sub(after_far)),
            self.config.cluster.shards,
            report.indexed
        );
        index.clear().await?;
        Ok(())
    }

    /// The midnight stage: `midnight` keyed jobs due at one instant on a
    /// topic paced at `midnight_pace` a second, with a window of
    /// `midnight_window_ms`; then the same burst without a window. Prints
    /// the busiest second, how many went out early or past their window,
    /// and the span, from the records' `tickler-dispatched-at`.
    async fn midnight(&self) -> anyhow::Result<()> {
        let (n, window_ms, pace) = (
            self.options.midnight,
            self.options.midnight_window_ms,
            self.options.midnight_pace,
        );
        let topic = self.topic();
        let response = self
            .http
            .patch(format!("{}/v1/topics/{topic}", self.base_url()))
            .json(&json!({ "max_per_second": pace }))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("midnight: pacing the topic: {}", response.text().await?);
        }
        for window in [Some(window_ms), None] {
            let lead = 3 + n / 20_000;
            let due = Utc::now() + chrono::Duration::seconds(lead as i64);
            let jobs: Vec<Value> = (0..n)
                .map(|i| {
                    let mut job = self.job(due, i);
                    job["key"] = json!(format!("midnight-{}-{i}", window.is_some()));
                    if let Some(window_ms) = window {
                        job["window_ms"] = json!(window_ms);
                    }
                    job
                })
                .collect();
            let ids = self.batches_created(jobs).await?;
            if Utc::now() >= due {
                bail!("midnight: creating {n} jobs took longer than the {lead} s lead");
            }
            let wait =
                Duration::from_millis(window.unwrap_or(0) + n * 1_000 / u64::from(pace) + 60_000);
            let seen = self.await_records(&ids, wait).await;
            let due_ms = due.timestamp_millis();
            let end_ms = due_ms + window.unwrap_or(0) as i64;
            let mut per_second: HashMap<i64, u64> = HashMap::new();
            for s in &seen {
                *per_second
                    .entry(s.dispatched_at_ms.div_euclid(1000))
                    .or_default() += 1;
            }
            let busiest = per_second.values().max().copied().unwrap_or(0);
            let early = seen.iter().filter(|s| s.dispatched_at_ms < due_ms).count();
            let past = seen.iter().filter(|s| s.dispatched_at_ms > end_ms).count();
            let last = seen
                .iter()
                .map(|s| s.dispatched_at_ms)
                .max()
                .unwrap_or(due_ms);
            let mut past_end: Vec<i64> = seen
                .iter()
                .map(|s| (s.dispatched_at_ms - end_ms).max(0))
                .collect();
            println!(
                "midnight: {n} jobs due at one instant on a topic paced at {pace}/s, {}: busiest second {busiest} jobs, early {early}, past the window {past}, the last {:.1} s after the instant; past the window's end {}",
                match window {
                    Some(ms) => format!("window {} s", ms / 1000),
                    None => "no window".to_owned(),
                },
                (last - due_ms) as f64 / 1000.0,
                percentiles(&mut past_end)
            );
            if seen.len() as u64 != n {
                bail!("midnight: {} of {n} jobs arrived", seen.len());
            }
        }
        Ok(())
    }

    /// Stage 6: reconciler cost among many far-future rows, and a re-index.
    ///
    /// Long because it is a scripted stage: seed, measure the pass, measure
    /// the re-index, print.
    async fn reconcile(&self, store: &Store, index: &Index) -> anyhow::Result<()> {
        let far = self.options.far_rows;
        let window_rows = self.options.window_rows;
        let now = store.db_now().await?;
        let seeding = Instant::now();
        let topic = format!("{}-reconcile", self.topic());
        store
            .job_seed(
                &topic,
                far,
                now + chrono::Duration::days(30),
                Duration::from_secs(335 * 86_400),
            )
            .await?;
        // The window rows after the far ones, due 5 to 9 minutes out, so none
        // is overdue yet when the probe runs.
        let now = store.db_now().await?;
        store
            .job_seed(
                &topic,
                window_rows,
                now + chrono::Duration::minutes(5),
                Duration::from_secs(240),
            )
            .await?;
        println!(
            "reconcile: seeded {far} far-future and {window_rows} window rows in {:.1} s",
            seeding.elapsed().as_secs_f64()
        );
        let mut reconciler = Reconciler::new(
            store.clone(),
            index.clone(),
            ReconcilerConfig::from_config(&self.config),
            Arc::new(Notify::new()),
            Resolver::new(
                store.clone(),
                index.clone(),
                &self.config,
                Arc::new(Notify::new()),
                Arc::new(Notify::new()),
            ),
        );
        let now = store.db_now().await?;
        let probe = Instant::now();
        let overdue = store.job_list_pending(None, now, None, 1000).await?;
        let probe = probe.elapsed();
        let pass = Instant::now();
        let report = reconciler.run_once(now).await?;
        let pass = pass.elapsed();
        println!(
            "reconcile: overdue probe {:.2} ms ({} overdue), full pass {:.2} ms ({report:?}) with {} pending rows seeded{}",
            probe.as_secs_f64() * 1000.0,
            overdue.len(),
            pass.as_secs_f64() * 1000.0,
            far + window_rows,
            if self.options.database.is_some() {
                " besides the database's own"
            } else {
                ""
            }
        );
        // The gauges from the truth over the same table: the (status,
        // topic) index is read whole, the rest are range scans.
        // Three computations, as the reporter makes them one after the
        // other: each goes on with the count where the last stopped.
        let mut counts = tickler::roles::reporter::truth::Counts::default();
        for _ in 0..3 {
            let truth = tickler::roles::reporter::truth::Truth::compute_with(
                store,
                index,
                &self.config,
                &mut counts,
            )
            .await?;
            let counted: u64 = truth.jobs.iter().map(|c| c.count).sum();
            println!(
                "reconcile: gauges from the truth in {} ms ({counted} live jobs counted by status and topic so far, {} overdue, drift {:?})",
                truth.scan_ms, truth.overdue.count, truth.window.drift
            );
        }
        self.forecast(store, &topic).await?;
        index.clear().await?;
        let mut loader = self.loader(store, index);
        let started = Instant::now();
        let report = loader.run_once(store.db_now().await?).await?;
        println!(
            "reconcile: re-index after Redis lost everything: {} window jobs in {:.2} s ({:.0} jobs/s)",
            report.indexed,
            started.elapsed().as_secs_f64(),
            report.indexed as f64 / started.elapsed().as_secs_f64()
        );
        if (report.indexed as u64) < window_rows {
            bail!(
                "re-index found {} of {window_rows} window jobs",
                report.indexed
            );
        }
        Ok(())
    }

    /// The forecast over the reconcile stage's rows: a month of the far
    /// ones by the hour (every topic, then the stage's topic alone), and a
    /// day by the minute. A round of the three first, not counted (the
    /// seeding's writes are still being flushed), then five rounds, the
    /// cases in turn; the median and the slowest of each.
    async fn forecast(&self, store: &Store, topic: &str) -> anyhow::Result<()> {
        let now = store.db_now().await?;
        let from = now + chrono::Duration::days(60);
        let cases = [
            (
                "a month by the hour, every topic",
                from + chrono::Duration::days(31),
                3_600_000,
                None,
            ),
            (
                "a month by the hour, one topic",
                from + chrono::Duration::days(31),
                3_600_000,
                Some(topic),
            ),
            (
                "a day by the minute, every topic",
                from + chrono::Duration::days(1),
                60_000,
                None,
            ),
        ];
        let mut took: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
        let mut jobs = vec![0u64; cases.len()];
        for round in 0..6 {
            for (i, (_, to, bucket_ms, topic)) in cases.iter().enumerate() {
                let range = tickler::api::ForecastRange {
                    from,
                    to: *to,
                    bucket_ms: *bucket_ms,
                };
                let started = Instant::now();
                let answer = tickler::api::forecast(store, range, *topic, None, now).await?;
                if round > 0 {
                    took[i].push(started.elapsed().as_secs_f64() * 1000.0);
                }
                jobs[i] = answer.buckets.iter().map(|b| b.jobs).sum::<u64>();
            }
        }
        for (i, (what, ..)) in cases.iter().enumerate() {
            took[i].sort_by(f64::total_cmp);
            println!(
                "reconcile: forecast of {what}: {:.0} ms median, {:.0} ms max of 5 ({} pending jobs in the range)",
                took[i][2], took[i][4], jobs[i]
            );
        }
        Ok(())
    }

    fn loader(&self, store: &Store, index: &Index) -> Loader {
        Loader::new(
            store.clone(),
            index.clone(),
            LoaderConfig::from_config(&self.config),
            Arc::new(Notify::new()),
        )
    }
}

/// p50, p99, p99.9 and max of lateness in ms.
/// The dispatcher's per-stage time so far (`tickler_dispatch_stage_seconds`
/// of this process): stage → (seconds summed, observations, median of the
/// summary's recent window).
fn stages_now() -> HashMap<String, (f64, f64, f64)> {
    let text = tickler::metrics::install().render();
    let mut stages: HashMap<String, (f64, f64, f64)> = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("tickler_dispatch_stage_seconds") else {
            continue;
        };
        let (kind, rest) = match rest.split_once('{') {
            Some((kind, rest)) => (kind.trim_start_matches('_'), rest),
            None => continue,
        };
        let kind = if kind.is_empty() && rest.contains("quantile=\"0.5\"") {
            "median"
        } else {
            kind
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let Some(stage) = labels
            .split(',')
            .find_map(|l| l.strip_prefix("stage=\"").and_then(|v| v.strip_suffix('"')))
        else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let entry = stages.entry(stage.to_owned()).or_default();
        match kind {
            "sum" => entry.0 = value,
            "count" => entry.1 = value,
            "median" => entry.2 = value,
            _ => {}
        }
    }
    stages
}

/// Jobs this process has marked dispatched (`tickler_jobs_dispatched_total`).
fn dispatched_total() -> f64 {
    let text = tickler::metrics::install().render();
    text.lines()
        .filter_map(|line| line.strip_prefix("tickler_jobs_dispatched_total"))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Mean time per stage since `before` (and the recent median), in the
/// order a job meets them.
fn stages_since(before: &HashMap<String, (f64, f64, f64)>) -> String {
    let now = stages_now();
    ["claim", "cas", "hold", "ack", "mark"]
        .iter()
        .filter_map(|stage| {
            let (sum, count, median) = now.get(*stage).copied()?;
            let (sum0, count0, _) = before.get(*stage).copied().unwrap_or_default();
            let n = count - count0;
            (n > 0.0).then(|| {
                format!(
                    "{stage} {:.2} ms (median {:.2}) × {n:.0}",
                    (sum - sum0) * 1000.0 / n,
                    median * 1000.0
                )
            })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn percentiles(values: &mut [i64]) -> String {
    if values.is_empty() {
        return "no records".to_owned();
    }
    values.sort_unstable();
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {} ms, p99 {} ms, p99.9 {} ms, max {} ms",
        at(0.5),
        at(0.99),
        at(0.999),
        values[values.len() - 1]
    )
}

async fn until(at: chrono::DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

/// Reads records on a thread of its own (a consumer in another process
/// would not wait for tickler's async runtime either), stamping each with
/// the time it arrived, until `stop`.
fn record(consumer: BaseConsumer, records: Records, stop: CancellationToken) {
    std::thread::spawn(move || {
        while !stop.is_cancelled() {
            let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let received_at_ms = Utc::now().timestamp_millis();
            let header = |name: &str| -> Option<i64> { header(&message, name)?.parse().ok() };
            let (Some(id), Some(scheduled_at_ms), Some(dispatched_at_ms)) = (
                header(tickler::domain::job::HEADER_JOB_ID),
                header(tickler::domain::job::HEADER_SCHEDULED_AT),
                header(tickler::domain::job::HEADER_DISPATCHED_AT),
            ) else {
                continue;
            };
            records
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(id as u64)
                .or_insert(Seen {
                    received_at_ms,
                    scheduled_at_ms,
                    dispatched_at_ms,
                });
        }
    });
}
