//! Stage 7 — instances. For n = 1, 2, … `instances`: n `tickler serve`
//! processes (this very binary) on one fresh database, Redis prefix and
//! topic, with every role; requests go round robin to their APIs.
//!
//! - schedule and burst throughput, as stages 1 and 3 measure them;
//! - with the most instances (2 or more): a steady stream, and kill -9 of
//!   the last instance in the middle of it. Figures: how long after the
//!   kill its shards are served again (the first record of a job on one of
//!   its shards due since the kill), how many claims it held were rescued
//!   and when the first of them arrived, and the lateness of the jobs due in
//!   the ten seconds after the kill.
//!
//! The child processes get the stores' settings through `TICKLER_*`
//! variables (and inherit the rest of the environment); like the in-process
//! stages they run without tokens or rate limits, on loopback.

use std::collections::{HashMap, HashSet};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use chrono::Utc;
use rdkafka::Offset;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{percentiles, record, until, Bench, BenchOptions, Records};
use tickler::config::Config;
use tickler::domain::job::shard_of;
use tickler::kafka;
use tickler::store::{scratch, Actor, Store};

/// `n` tickler processes sharing one database, prefix and topic.
struct Deployment {
    children: Vec<Child>,
    store: Store,
    db_name: String,
    config: Config,
}

impl Deployment {
    async fn start(
        base: &Config,
        n: usize,
        server_url: &str,
        suffix: &str,
    ) -> anyhow::Result<(Deployment, Vec<String>)> {
        let db_name = format!("tickler_bench_{suffix}_n{n}");
        let mysql_url =
            scratch::scratch_database_create(server_url, &db_name, base.mysql.history_hand_edits)
                .await?;
        let mut config = base.clone();
        config.mysql.url = mysql_url.clone();
        config.redis.prefix = format!("tickler-bench-{suffix}-n{n}");
        config.results.topic = format!("tickler-bench-results-{suffix}");
        config.results.group = format!("tickler-bench-{suffix}-n{n}");
        let exe = std::env::current_exe().context("finding the tickler binary")?;
        let mut children = Vec::new();
        let mut urls = Vec::new();
        for _ in 0..n {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let addr = format!("127.0.0.1:{port}");
            let child = Command::new(&exe)
                .arg("serve")
                .env("TICKLER_MYSQL_URL", &config.mysql.url)
                .env("TICKLER_REDIS_URL", &config.redis.url)
                .env("TICKLER_KAFKA_BROKERS", &config.kafka.brokers)
                .env("TICKLER_REDIS_PREFIX", &config.redis.prefix)
                .env("TICKLER_API_ADDR", &addr)
                .env("TICKLER_API_AUTH", "none")
                .env("TICKLER_API_RATE_REQUESTS", "0")
                .env("TICKLER_API_RATE_JOBS", "0")
                .env("TICKLER_RESULTS_TOPIC", &config.results.topic)
                .env("TICKLER_RESULTS_GROUP", &config.results.group)
                .env("TICKLER_CLUSTER_SHARDS", config.cluster.shards.to_string())
                .env(
                    "TICKLER_CLUSTER_INSTANCE_TTL_MS",
                    config.cluster.instance_ttl_ms.to_string(),
                )
                .env(
                    "TICKLER_LOG",
                    std::env::var("TICKLER_BENCH_CHILD_LOG").unwrap_or_else(|_| "warn".to_owned()),
                )
                .stdin(Stdio::null())
                // Their logs to `TICKLER_BENCH_LOGS/instance-<port>.log` when
                // that is set (to see where a failover's time goes).
                .stdout(match std::env::var_os("TICKLER_BENCH_LOGS") {
                    Some(dir) => Stdio::from(std::fs::File::create(
                        std::path::Path::new(&dir).join(format!("instance-{port}.log")),
                    )?),
                    None => Stdio::null(),
                })
                .spawn()
                .context("starting tickler serve")?;
            children.push(child);
            urls.push(format!("http://{addr}"));
        }
        let store = Store::connect_lazy(&mysql_url, 2, Actor::Bench)?;
        let deployment = Deployment {
            children,
            store,
            db_name,
            config,
        };
        deployment.ready(&urls).await?;
        Ok((deployment, urls))
    }

    /// Every API answers and the shards are spread over every instance.
    async fn ready(&self, urls: &[String]) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut healthy = 0;
            for url in urls {
                if let Ok(response) = http.get(format!("{url}/healthz")).send().await {
                    healthy += usize::from(response.status().is_success());
                }
            }
            let leases = self.store.shard_leases().await.unwrap_or_default();
            let owners: HashSet<u64> = leases.iter().filter_map(|l| l.owner).collect();
            let all_owned = !leases.is_empty() && leases.iter().all(|l| l.owner.is_some());
            if healthy == urls.len() && all_owned && owners.len() == urls.len() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "instances: {healthy} of {} APIs healthy, shards held by {} after 60 s",
                    urls.len(),
                    owners.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn stop(mut self, server_url: &str) -> anyhow::Result<()> {
        for child in &mut self.children {
            // SIGTERM: each hands its shards back and leaves.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
        self.store.close().await;
        scratch::scratch_database_drop(server_url, &self.db_name).await?;
        Ok(())
    }
}

pub(super) async fn run(
    base: &Config,
    options: &BenchOptions,
    server_url: &str,
    suffix: &str,
) -> anyhow::Result<()> {
    if options.instances == 0 || !options.wants("instances") {
        return Ok(());
    }
    let mut base = base.clone();
    base.kafka.topic_check = tickler::config::TopicCheck::Warn;
    for n in 1..=options.instances {
        let topic = format!("tickler-bench-{suffix}-n{n}");
        kafka::topic_ensure(&base.kafka.brokers, &topic, 4).await?;
        let (deployment, urls) = Deployment::start(&base, n, server_url, suffix).await?;
        let records: Records = Arc::new(Mutex::new(HashMap::new()));
        let consumer =
            kafka::tail::base_consumer_assigned(&base.kafka.brokers, &topic, Offset::Beginning)?;
        let stop_consumer = CancellationToken::new();
        record(consumer, records.clone(), stop_consumer.clone());
        let bench = Bench {
            options: options.clone(),
            config: deployment.config.clone(),
            topic: Mutex::new(topic),
            stop_consumers: stop_consumer.clone(),
            http: reqwest::Client::new(),
            base_urls: urls,
            next: Default::default(),
            records,
        };
        println!(
            "instances: {n} tickler serve process{} on one database ({} shards, cluster.instance_ttl_ms {})",
            if n == 1 { "" } else { "es" },
            deployment.config.cluster.shards,
            deployment.config.cluster.instance_ttl_ms
        );
        let outcome = async {
            bench.schedule().await?;
            bench.burst(&deployment.store).await?;
            if n == options.instances && n >= 2 {
                failover(&bench, &deployment).await?;
            }
            anyhow::Ok(())
        }
        .await;
        stop_consumer.cancel();
        deployment.stop(server_url).await?;
        outcome?;
    }
    Ok(())
}

/// A steady stream through every API but the last instance's; kill -9 of
/// the last instance in the middle of it.
///
/// Long because it is a scripted scenario, read top to bottom: stream,
/// kill, wait for the takeover, drain, audit, print.
async fn failover(bench: &Bench, deployment: &Deployment) -> anyhow::Result<()> {
    let victim = deployment.children.len() - 1;
    let rate = bench.options.rate;
    let secs: u64 = if bench.options.smoke { 6 } else { 20 };
    let kill_after = secs / 2;
    let ttl = Duration::from_millis(deployment.config.cluster.instance_ttl_ms);
    let shards = deployment.config.cluster.shards;
    // A topic of its own, read from its start: the claims the victim held
    // are read back from their time less a minute, and on the stage's
    // earlier topic that falls among the burst's records — inside a
    // multi-record batch, where tansu answers a fetch with nothing (Apache
    // Kafka answers with the whole batch), so those claims would stay in
    // doubt on this broker.
    let topic = format!("{}-failover", bench.topic());
    kafka::topic_ensure(&deployment.config.kafka.brokers, &topic, 4).await?;
    let records: Records = Arc::new(Mutex::new(HashMap::new()));
    let consumer = kafka::tail::base_consumer_assigned(
        &deployment.config.kafka.brokers,
        &topic,
        Offset::Beginning,
    )?;
    record(consumer, records.clone(), bench.stop_consumers.clone());
    // `TICKLER_BENCH_PAUSE_MS`: also pause (SIGSTOP) the first survivor
    // that long, 2 s after the kill (#42's scenario); the stream then goes
    // through the other survivor's API only.
    let pause = std::env::var("TICKLER_BENCH_PAUSE_MS")
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .filter(|ms| *ms > 0 && victim >= 2)
        .map(Duration::from_millis);
    let streamed_through = if pause.is_some() {
        1..victim
    } else {
        0..victim
    };
    let survivors = Bench {
        base_urls: bench.base_urls[streamed_through].to_vec(),
        options: bench.options.clone(),
        config: bench.config.clone(),
        topic: Mutex::new(topic),
        stop_consumers: bench.stop_consumers.clone(),
        http: bench.http.clone(),
        next: Default::default(),
        records,
    };

    let start = Utc::now() + chrono::Duration::seconds(2);
    let step_us = 1_000_000 / rate as i64;
    let mut due: HashMap<u64, i64> = HashMap::new();
    let mut killed: Option<(i64, u64, HashSet<u32>)> = None;
    for second in 0..secs {
        let at = start + chrono::Duration::seconds(second as i64 - 2);
        until(at).await;
        if second == kill_after + 2 {
            killed = Some(kill(deployment, victim).await?);
        }
        if let Some(pause) = pause.filter(|_| second == kill_after + 4) {
            let pid = deployment.children[0].id().to_string();
            Command::new("kill").args(["-STOP", &pid]).status()?;
            println!(
                "failover: instance pid {pid} paused for {} ms, 2 s after the kill",
                pause.as_millis()
            );
            tokio::spawn(async move {
                tokio::time::sleep(pause).await;
                let _ = Command::new("kill").args(["-CONT", &pid]).status();
            });
        }
        let jobs: Vec<(Value, i64)> = (0..rate)
            .map(|i| {
                let at = start
                    + chrono::Duration::seconds(second as i64)
                    + chrono::Duration::microseconds(step_us * i as i64);
                (survivors.job(at, second * rate + i), at.timestamp_millis())
            })
            .collect();
        let ids = survivors
            .batches_created(jobs.iter().map(|(j, _)| j.clone()).collect())
            .await?;
        // The batch API answers in order.
        due.extend(ids.into_iter().zip(jobs.iter().map(|(_, at)| *at)));
    }
    let (kill_ms, victim_id, victim_shards) =
        killed.context("the victim was killed during the stream")?;
    let ids: Vec<u64> = due.keys().copied().collect();
    let seen = survivors
        .await_records(&ids, Duration::from_secs(secs + 60))
        .await;
    // Missing records fail the stage, after its figures are printed.
    let mut missing_said = None;
    if seen.len() != ids.len() {
        // Say where the missing ones are, so a failure can be read.
        let arrived: HashSet<u64> = {
            let records = survivors.records.lock().unwrap_or_else(|p| p.into_inner());
            ids.iter()
                .filter(|id| records.contains_key(*id))
                .copied()
                .collect()
        };
        let missing: Vec<u64> = ids
            .iter()
            .filter(|id| !arrived.contains(*id))
            .copied()
            .collect();
        let rows = deployment
            .store
            .job_get_many(&missing[..missing.len().min(10)])
            .await?;
        // A fresh reader from the beginning: is each missing record on the
        // topic after all (the bench's reader missed it), or not?
        let reread: Records = Arc::new(Mutex::new(HashMap::new()));
        let stop = CancellationToken::new();
        record(
            kafka::tail::base_consumer_assigned(
                &deployment.config.kafka.brokers,
                &bench.topic(),
                Offset::Beginning,
            )?,
            reread.clone(),
            stop.clone(),
        );
        let reread_by = Instant::now() + Duration::from_secs(30);
        while Instant::now() < reread_by
            && !reread
                .lock()
                .map(|r| missing.iter().all(|id| r.contains_key(id)))
                .unwrap_or(false)
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        stop.cancel();
        let reread = reread.lock().map(|r| r.clone()).unwrap_or_default();
        println!(
            "failover: a fresh reader from the beginning finds {} of the {} missing on the topic",
            missing.iter().filter(|id| reread.contains_key(*id)).count(),
            missing.len()
        );
        let mut described = Vec::new();
        for job in &rows {
            // What the topic holds where the row says its record is: the
            // bench's reader missing it, or the record not there.
            let at = match (job.kafka_partition, job.kafka_offset) {
                (Some(partition), Some(offset)) => format!(
                    " (there: {:?})",
                    kafka::record_at(
                        &deployment.config.kafka.brokers,
                        &deployment.config.kafka.options,
                        &bench.topic(),
                        partition,
                        offset,
                        Duration::from_secs(5),
                    )
                    .await
                ),
                _ => String::new(),
            };
            let history: Vec<String> = deployment
                .store
                .job_history(job.id)
                .await?
                .iter()
                .map(|e| {
                    format!(
                        "{} {} by {}",
                        e.at.format("%H:%M:%S%.3f"),
                        e.status,
                        e.actor
                    )
                })
                .collect();
            let shard = shard_of(job.id, deployment.config.cluster.shards);
            described.push(format!(
                "job {} (shard {shard}, the victim's: {}) {} attempt {} due {} updated_at {} kafka {:?}/{:?}{at} last_error {:?} history [{}]",
                job.id,
                victim_shards.contains(&shard),
                job.status,
                job.attempt,
                job.schedule_time,
                job.updated_at,
                job.kafka_partition,
                job.kafka_offset,
                job.last_error,
                history.join("; ")
            ));
        }
        let rows = described;
        missing_said = Some(format!(
            "failover: {} of {} jobs arrived (victim instance {victim_id}, killed at {kill_ms}); missing: {}",
            seen.len(),
            ids.len(),
            rows.join("; ")
        ));
    }
    let records = survivors
        .records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let received = |id: &u64| records.get(id).map(|s| s.received_at_ms);

    // Its shards served again: the first record of a job of theirs due
    // since the kill.
    let served_again = due
        .iter()
        .filter(|(id, at)| **at >= kill_ms && victim_shards.contains(&shard_of(**id, shards)))
        .filter_map(|(id, _)| received(id))
        .min()
        .map(|at| at - kill_ms);
    // The claims it held, rescued once it was found dead.
    // Produced again by a survivor: the first record of such a job may be
    // the victim's own, sent just before it died, so the time is the
    // survivor's (the row's dispatched_at, set by the mark that won).
    let rescued = deployment.store.jobs_rescued_from(victim_id).await?;
    let mut first_rescued = None;
    for id in &rescued {
        if let Some(at) = deployment.store.job_get(*id).await?.dispatched_at {
            let after = at.timestamp_millis() - kill_ms;
            first_rescued = Some(first_rescued.map_or(after, |f: i64| f.min(after)));
        }
    }
    let window_ms = 10_000;
    let mut after: Vec<i64> = due
        .iter()
        .filter(|(_, at)| **at >= kill_ms && **at < kill_ms + window_ms)
        .filter_map(|(id, at)| received(id).map(|r| r - at))
        .collect();
    let mut theirs: Vec<i64> = due
        .iter()
        .filter(|(id, at)| {
            **at >= kill_ms
                && **at < kill_ms + window_ms
                && victim_shards.contains(&shard_of(**id, shards))
        })
        .filter_map(|(id, at)| received(id).map(|r| r - at))
        .collect();
    let ms = |v: Option<i64>| v.map_or("none".to_owned(), |v| format!("{v} ms"));
    println!(
        "failover: kill -9 of 1 of {} instances at {rate} jobs/s: its {} shards served again {} after the kill (cluster.instance_ttl_ms {}); {} claims it held rescued, the first produced again {} after the kill",
        deployment.children.len(),
        victim_shards.len(),
        ms(served_again),
        ttl.as_millis(),
        rescued.len(),
        ms(first_rescued),
    );
    println!(
        "failover: lateness of jobs due in the {} s after the kill: all {}; on its shards {}",
        window_ms / 1000,
        percentiles(&mut after),
        percentiles(&mut theirs)
    );
    // The latest job due after the kill, and what happened to it: where a
    // failover's time goes.
    let latest = due
        .iter()
        .filter(|(_, at)| **at >= kill_ms && **at < kill_ms + window_ms)
        .filter_map(|(id, at)| received(id).map(|r| (r - at, *id, *at)))
        .max();
    if let Some((late, id, at)) = latest {
        let history: Vec<String> = deployment
            .store
            .job_history(id)
            .await?
            .iter()
            .map(|e| {
                format!(
                    "{:+} ms {} by {}",
                    e.at.timestamp_millis() - kill_ms,
                    e.status,
                    e.actor
                )
            })
            .collect();
        println!(
            "failover: the latest, job {id} (due {:+} ms after the kill, {late} ms late): {}",
            at - kill_ms,
            history.join("; ")
        );
    }
    match missing_said {
        Some(said) => bail!(said),
        None => Ok(()),
    }
}

/// kill -9 of instance `victim`; returns when (ms since the epoch), its
/// instance id and the shards it held.
async fn kill(deployment: &Deployment, victim: usize) -> anyhow::Result<(i64, u64, HashSet<u32>)> {
    let pid = deployment.children[victim].id();
    let instances = deployment
        .store
        .instances_list(Duration::from_millis(
            deployment.config.cluster.instance_ttl_ms,
        ))
        .await?;
    let id = instances
        .iter()
        .find(|i| i.pid == pid && i.live)
        .map(|i| i.id)
        .context("the victim is registered")?;
    let shards: HashSet<u32> = deployment
        .store
        .shard_leases()
        .await?
        .iter()
        .filter(|l| l.owner == Some(id))
        .map(|l| l.shard)
        .collect();
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()?;
    let kill_ms = Utc::now().timestamp_millis();
    if !status.success() {
        bail!("kill -9 {pid} failed");
    }
    Ok((kill_ms, id, shards))
}
