//! The soak: a steady stream of jobs through one tickler for a long time,
//! with figures per interval — jobs, lateness at dispatch (the database's
//! `dispatched_at − schedule_time`) and at the consumer, tickler's memory
//! and open files, MariaDB's and the broker's memory, the `jobs` and
//! `job_events` row counts — and the fault suite's checker at the end.
//!
//! `scripts/soak [SECS RATE]` runs the long version (an hour at 1,000 jobs
//! a second, release build, figures every minute). The suite runs a minute
//! at 200 jobs a second and asserts only what the checker asserts: nothing
//! lost, early or doubled. The figures go in docs/benchmarks.md, never into
//! an assertion.
//!
//! Settings (environment): `TICKLER_SOAK_SECS` (60), `TICKLER_SOAK_RATE`
//! (200), `TICKLER_SOAK_REPORT_SECS` (10, or 60 for runs of ten minutes and
//! more), `TICKLER_SOAK_RETENTION_MS` (three report intervals, at least 30
//! s: finished jobs are purged while jobs flow, so the tables level off).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{NaiveDateTime, Utc};
use tickler_testkit::chronos::{check, Expected, Seen, Services, World};

/// Each job is due this long after it is created.
const DUE_AFTER_MS: i64 = 2_000;
/// Creates go out this often, `rate / 10` jobs a request.
const CREATE_EVERY: Duration = Duration::from_millis(100);

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// Open file descriptors of process `pid`.
fn fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// The oldest process whose command line matches `pattern`.
fn pid_of(pattern: &str) -> Option<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-o", "-f", pattern])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn mib(value: Option<f64>) -> String {
    value.map_or("?".to_owned(), |v| format!("{v:.1}"))
}

/// The `p`-th percentile of `values` (sorted here), 0 if none.
fn percentile(values: &mut [i64], p: f64) -> i64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    let rank = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[rank]
}

/// One interval's figures.
struct Interval {
    created: usize,
    at_dispatch: Vec<i64>,
    at_consumer: Vec<i64>,
    rss_mib: Option<f64>,
}

/// Creates `rate` jobs a second, each due [`DUE_AFTER_MS`] after its
/// creation, until `stop`; counts them in `created`. Returns what was
/// accepted, and how many creates were refused or went unanswered.
async fn create_steadily(
    http: reqwest::Client,
    addr: String,
    topic: String,
    rate: u64,
    created: Arc<AtomicUsize>,
    stop: tokio_util::sync::CancellationToken,
) -> (Vec<Expected>, usize) {
    let per_request = (rate / 10).max(1) as usize;
    let mut expected = Vec::new();
    let mut failed = 0;
    let mut tick = tokio::time::interval(CREATE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0usize;
    while !stop.is_cancelled() {
        tick.tick().await;
        let due = Utc::now() + chrono::Duration::milliseconds(DUE_AFTER_MS);
        let jobs: Vec<serde_json::Value> = (0..per_request)
            .map(|i| serde_json::json!({"topic": topic, "payload": {"n": n + i}, "run_at": due.to_rfc3339()}))
            .collect();
        n += per_request;
        let answer = http
            .post(format!("http://{addr}/v1/jobs/batch"))
            .timeout(Duration::from_secs(10))
            .json(&serde_json::json!({ "jobs": jobs }))
            .send()
            .await;
        let body: Option<serde_json::Value> = match answer {
            Ok(response) if response.status().is_success() => response.json().await.ok(),
            _ => None,
        };
        let Some(results) = body.as_ref().and_then(|b| b["results"].as_array()) else {
            failed += per_request;
            continue;
        };
        for item in results {
            match item["id"].as_u64() {
                Some(id) if item["result"] == "created" => expected.push(Expected {
                    id,
                    due_ms: due.timestamp_millis(),
                }),
                _ => failed += 1,
            }
        }
        created.store(expected.len(), Ordering::Relaxed);
    }
    (expected, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_stream_for_a_long_time_keeps_every_promise() {
    let secs = setting("TICKLER_SOAK_SECS", 60);
    let rate = setting("TICKLER_SOAK_RATE", 200).max(10);
    let report_secs = setting(
        "TICKLER_SOAK_REPORT_SECS",
        if secs >= 600 { 60 } else { 10 },
    )
    .max(1);
    let retention_ms = setting(
        "TICKLER_SOAK_RETENTION_MS",
        (report_secs * 3_000).max(30_000),
    );
    let retention = retention_ms.to_string();
    // The defaults of a deployment, not the fault suite's quick ones.
    let world = World::start(
        Services::shared(),
        &[
            ("TICKLER_JOBS_RETENTION_MS", retention.as_str()),
            ("TICKLER_CLUSTER_SHARDS", "16"),
            ("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "30000"),
            ("TICKLER_KAFKA_MESSAGE_TIMEOUT_MS", "10000"),
            ("TICKLER_RECONCILER_INTERVAL_MS", "2000"),
            ("TICKLER_LOADER_INTERVAL_MS", "1000"),
            ("TICKLER_DISPATCHER_IDLE_MS", "1000"),
        ],
    )
    .await;
    let tickler_pid = world.tickler.pid().expect("tickler runs");
    let mariadb_pid = pid_of("^(/usr/sbin/)?mariadbd");
    let broker_pid = pid_of("tansu broker --listener-url tcp://127.0.0.1:9092");
    eprintln!(
        "soak: {secs} s at {rate} jobs/s, each due {DUE_AFTER_MS} ms after its creation, \
         figures every {report_secs} s, retention {retention_ms} ms; tickler {}",
        tickler_testkit::procs::tickler_bin().display()
    );

    let created = Arc::new(AtomicUsize::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    let creator = tokio::spawn(create_steadily(
        world.http.clone(),
        world.http_addr.clone(),
        world.topic.clone(),
        rate,
        created.clone(),
        stop.clone(),
    ));

    let started = tokio::time::Instant::now();
    let mut intervals: Vec<Interval> = Vec::new();
    let mut seen_upto = 0;
    let mut created_before = 0;
    let mut db_from: NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
        .fetch_one(&world.sql)
        .await
        .unwrap();
    let mut next = started;
    while started.elapsed() < Duration::from_secs(secs) {
        next += Duration::from_secs(report_secs);
        tokio::time::sleep_until(next).await;
        let db_to: NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
            .fetch_one(&world.sql)
            .await
            .unwrap();
        // Marked after they were dispatched: `status_at` (the mark's time
        // for a dispatched job) narrows the scan to this interval's rows.
        let mut at_dispatch: Vec<i64> = sqlx::query_scalar(
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, schedule_time, dispatched_at) DIV 1000 AS SIGNED) \
             FROM jobs WHERE status = 'dispatched' AND status_at >= ? \
             AND dispatched_at >= ? AND dispatched_at < ?",
        )
        .bind(db_from)
        .bind(db_from)
        .bind(db_to)
        .fetch_all(&world.sql)
        .await
        .unwrap();
        db_from = db_to;
        let (new, upto) = world.seen_from(seen_upto);
        seen_upto = upto;
        let mut at_consumer: Vec<i64> = new
            .iter()
            .map(|s: &Seen| s.received_at_ms - s.scheduled_at_ms)
            .collect();
        let (jobs, events): (i64, i64) =
            sqlx::query_as("SELECT (SELECT COUNT(*) FROM jobs), (SELECT COUNT(*) FROM job_events)")
                .fetch_one(&world.sql)
                .await
                .unwrap();
        let now_created = created.load(Ordering::Relaxed);
        let interval = Interval {
            created: now_created - created_before,
            rss_mib: rss_mib(tickler_pid),
            at_dispatch: at_dispatch.clone(),
            at_consumer: at_consumer.clone(),
        };
        created_before = now_created;
        eprintln!(
            "soak: {:>5} s  jobs {:>6}  at dispatch p50 {:>4} p99 {:>5} ms  at consumer p50 {:>5} p99 {:>6} ms  \
             tickler RSS {:>6} MiB fds {:>4}  mariadbd {:>7} MiB  broker {:>7} MiB  rows jobs {:>8} job_events {:>8}",
            started.elapsed().as_secs(),
            interval.created,
            percentile(&mut at_dispatch, 0.5),
            percentile(&mut at_dispatch, 0.99),
            percentile(&mut at_consumer, 0.5),
            percentile(&mut at_consumer, 0.99),
            mib(interval.rss_mib),
            fds(tickler_pid).map_or("?".to_owned(), |n| n.to_string()),
            mib(mariadb_pid.and_then(rss_mib)),
            mib(broker_pid.and_then(rss_mib)),
            jobs,
            events,
        );
        intervals.push(interval);
    }
    stop.cancel();
    let (expected, failed) = creator.await.unwrap();

    // The first and the last sixth of the run (ten minutes of an hour),
    // side by side: what the "flat" is judged by.
    let part = (intervals.len() / 6).max(1);
    let pooled = |range: &[Interval]| {
        let mut dispatch: Vec<i64> = range.iter().flat_map(|i| i.at_dispatch.clone()).collect();
        let mut consumer: Vec<i64> = range.iter().flat_map(|i| i.at_consumer.clone()).collect();
        (
            percentile(&mut dispatch, 0.5),
            percentile(&mut dispatch, 0.99),
            percentile(&mut consumer, 0.5),
            percentile(&mut consumer, 0.99),
        )
    };
    let first = pooled(&intervals[..part]);
    let last = pooled(&intervals[intervals.len() - part..]);
    let rss_after_first = intervals[part - 1].rss_mib;
    let rss_end = intervals.last().and_then(|i| i.rss_mib);
    eprintln!(
        "soak: first {part} interval(s): at dispatch p50 {} p99 {} ms, at consumer p50 {} p99 {} ms; \
         last {part}: at dispatch p50 {} p99 {} ms, at consumer p50 {} p99 {} ms",
        first.0, first.1, first.2, first.3, last.0, last.1, last.2, last.3
    );
    if let (Some(from), Some(to)) = (rss_after_first, rss_end) {
        eprintln!(
            "soak: tickler RSS {from:.1} MiB after the first {part} interval(s), {to:.1} MiB at the end ({:+.1} %)",
            (to - from) / from * 100.0
        );
    }
    eprintln!(
        "soak: {} jobs accepted, {failed} creates refused or unanswered",
        expected.len()
    );

    let ids: HashSet<u64> = expected.iter().map(|e| e.id).collect();
    world.await_seen(&ids, Duration::from_secs(120)).await;
    let verdict = check(
        &expected,
        &HashSet::new(),
        &world.interrupted().await,
        &world.seen_audited().await,
    );
    world.explain(&verdict).await;
    verdict.assert_clean("soak");
    world.finish().await;
}
