//! The fault suite's world and checker, after Jepsen's Chronos test: every
//! job has a target window [schedule_time, schedule_time + bound]; a
//! consumer records every record's arrival; the checker reports jobs lost,
//! produced early, cancelled-but-produced, and duplicates — separating those
//! a fault explains (the job's dispatch was interrupted) from the rest.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use rdkafka::consumer::StreamConsumer;
use rdkafka::Message;
use sqlx::mysql::MySqlPool;
use tickler::kafka;
use tickler::kafka::tail::header;
use tickler::store::scratch;
use tokio_util::sync::CancellationToken;

use super::procs::{free_port, scratch_dir, tickler_bin, Proc};
use super::{consumer_from_beginning, eventually, unique};

/// Where the world's services are.
#[derive(Clone, Debug)]
pub struct Services {
    /// MySQL server URL without a database.
    pub mysql_server_url: String,
    pub redis_url: String,
    pub brokers: String,
    /// `user:password` tickler connects as, when not the server URL's
    /// (e.g. an account with privileges on its databases only, as on a
    /// managed MySQL); the world's own setup and checks use the server
    /// URL's.
    pub tickler_account: Option<String>,
}

impl Services {
    pub fn shared() -> Services {
        Services {
            mysql_server_url: super::mysql_server_url(),
            redis_url: super::redis_url(),
            brokers: super::kafka_brokers(),
            tickler_account: None,
        }
    }

    /// `mysql.url` with tickler's account in place of the one it names.
    pub fn tickler_mysql_url(&self, mysql_url: &str) -> String {
        match (&self.tickler_account, mysql_url.split_once("://")) {
            (Some(account), Some((scheme, rest))) => {
                let host = rest.split_once('@').map_or(rest, |(_, host)| host);
                format!("{scheme}://{account}@{host}")
            }
            _ => mysql_url.to_owned(),
        }
    }
}

/// A job the test scheduled, and when it is due (ms since the epoch).
#[derive(Clone, Copy, Debug)]
pub struct Expected {
    pub id: u64,
    pub due_ms: i64,
}

/// A record as the consumer saw it.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub id: u64,
    pub attempt: u32,
    pub received_at_ms: i64,
    /// Where the record is on the topic: two copies at one position are the
    /// consumer reading twice, at two positions the record produced twice.
    pub partition: i32,
    pub offset: i64,
    /// Its `tickler-dispatched-at`: lateness at dispatch, apart from how
    /// far behind the consumer reads.
    pub dispatched_at_ms: i64,
    /// Its `tickler-scheduled-at`: the job's time when it was produced,
    /// which tells a record of a job's old time from one of its new time
    /// after a PATCH.
    pub scheduled_at_ms: i64,
}

/// One fault test's deployment: its database, topic, Redis prefix, one or
/// more `tickler serve` child processes sharing them, and a consumer
/// recording every record.
pub struct World {
    pub services: Services,
    pub db_name: String,
    pub mysql_url: String,
    pub topic: String,
    /// The topic this tickler reads results from.
    pub results_topic: String,
    /// Its Redis keys' prefix.
    pub redis_prefix: String,
    /// The first instance's API.
    pub http_addr: String,
    /// Every instance's API, in instance order.
    pub http_addrs: Vec<String>,
    pub sql: MySqlPool,
    /// The first instance.
    pub tickler: Proc,
    /// Instances 1.. of a world of several.
    pub others: Vec<Proc>,
    pub http: reqwest::Client,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: CancellationToken,
    /// Whether `finish` ran; if not (the test panicked), drop cleans up.
    finished: bool,
}

/// Settings that make faults show quickly: short leases and intervals.
pub fn fast_settings() -> Vec<(String, String)> {
    [
        ("TICKLER_CLUSTER_SHARDS", "4"),
        ("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "5000"),
        ("TICKLER_KAFKA_MESSAGE_TIMEOUT_MS", "2000"),
        ("TICKLER_RECONCILER_INTERVAL_MS", "500"),
        ("TICKLER_LOADER_INTERVAL_MS", "200"),
        ("TICKLER_DISPATCHER_IDLE_MS", "200"),
        ("TICKLER_LOG", "warn"),
        // As the suite's other instances: portable, hand edits observed.
        ("TICKLER_MYSQL_ENGINE", "portable"),
        ("TICKLER_MYSQL_HISTORY_HAND_EDITS", "observe"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl World {
    /// Creates the database and topic, starts the recording consumer and
    /// `tickler serve` with `extra_env` on top of the fast settings.
    pub async fn start(services: Services, extra_env: &[(&str, &str)]) -> World {
        World::start_many(services, 1, extra_env).await
    }

    /// `start`, with `instances` tickler processes on the one database,
    /// Redis prefix and topic, each with its own API port.
    pub async fn start_many(
        services: Services,
        instances: usize,
        extra_env: &[(&str, &str)],
    ) -> World {
        super::init_logging();
        let db_name = unique("tickler_t_");
        // A private server just started may take its port a moment before
        // it takes connections (seen under a loaded suite): try for a while.
        let mysql_url = eventually(Duration::from_secs(30), || async {
            scratch::scratch_database_create(
                &services.mysql_server_url,
                &db_name,
                tickler::config::HandEdits::Observe,
            )
            .await
            .ok()
        })
        .await
        .expect("mysql answers");

        let topic = unique("tickler-fault-");
        // As MySQL above: a broker under the loaded suite has let the
        // admin request time out (10 s) once; try for a while.
        let made = eventually(Duration::from_secs(60), || async {
            match kafka::topic_ensure(&services.brokers, &topic, 2).await {
                Ok(()) => Some(()),
                Err(err) => {
                    eprintln!("topic {topic} not made yet: {err}");
                    None
                }
            }
        })
        .await;
        assert!(made.is_some(), "kafka makes topic {topic} within 60 s");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let consumer = consumer_from_beginning(&services.brokers, &topic);
        tokio::spawn(record(consumer, seen.clone(), stop.clone()));

        let secret = super::token_create(&mysql_url, "chronos", &["*"], &["admin"]).await;
        let http_addrs: Vec<String> = (0..instances.max(1))
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let results_topic = unique("tickler-results-");
        let redis_prefix = unique("tickler-t-");
        let mut env = fast_settings();
        env.extend([
            (
                "TICKLER_MYSQL_URL".to_owned(),
                services.tickler_mysql_url(&mysql_url),
            ),
            ("TICKLER_REDIS_URL".to_owned(), services.redis_url.clone()),
            ("TICKLER_KAFKA_BROKERS".to_owned(), services.brokers.clone()),
            ("TICKLER_REDIS_PREFIX".to_owned(), redis_prefix.clone()),
            ("TICKLER_RESULTS_TOPIC".to_owned(), results_topic.clone()),
            ("TICKLER_RESULTS_GROUP".to_owned(), unique("tickler-t-")),
        ]);
        for (k, v) in extra_env {
            env.retain(|(key, _)| key != k);
            env.push((k.to_string(), v.to_string()));
        }
        let dir = scratch_dir();
        let mut procs = http_addrs.iter().enumerate().map(|(i, addr)| {
            let mut env = env.clone();
            env.push(("TICKLER_API_ADDR".to_owned(), addr.clone()));
            Proc::spawn(
                &format!("tickler-{i}"),
                &tickler_bin().to_string_lossy(),
                &["serve".to_owned()],
                &env,
                dir.join(format!("tickler-{i}.log")),
            )
        });
        let tickler = procs.next().expect("one instance at least");
        let others: Vec<Proc> = procs.collect();
        let world = World {
            services,
            db_name,
            sql: MySqlPool::connect(&mysql_url).await.unwrap(),
            mysql_url,
            topic,
            results_topic,
            redis_prefix,
            http_addr: http_addrs[0].clone(),
            http_addrs,
            tickler,
            others,
            http: super::http_with_token(&secret),
            seen,
            stop,
            finished: false,
        };
        for i in 0..world.http_addrs.len() {
            world.healthy_instance(i).await;
        }
        world
    }

    /// Waits until the first instance answers /healthz.
    pub async fn healthy(&self) {
        self.healthy_instance(0).await;
    }

    /// Waits until instance `i` answers /healthz.
    pub async fn healthy_instance(&self, i: usize) {
        let up = eventually(Duration::from_secs(30), || async {
            // A process that exited (its port taken, say) must not pass for
            // healthy because something else answers on that port.
            if !self.instance(i).alive() {
                return Some(false);
            }
            let response = self
                .http
                .get(format!("http://{}/healthz", self.http_addrs[i]))
                .send()
                .await
                .ok()?;
            response.status().is_success().then_some(true)
        })
        .await;
        assert!(
            up == Some(true),
            "tickler {i} is healthy; log:\n{}",
            self.instance(i).log_tail()
        );
    }

    /// Instance `i`'s process.
    pub fn instance(&self, i: usize) -> &Proc {
        if i == 0 {
            &self.tickler
        } else {
            &self.others[i - 1]
        }
    }

    pub fn instance_mut(&mut self, i: usize) -> &mut Proc {
        if i == 0 {
            &mut self.tickler
        } else {
            &mut self.others[i - 1]
        }
    }

    pub async fn restart_tickler(&mut self) {
        self.tickler.start();
        self.healthy().await;
    }

    /// Schedules `n` jobs due evenly over [first, first + span), through the
    /// API, 16 requests at a time.
    pub async fn jobs_schedule(
        &self,
        n: usize,
        first: DateTime<Utc>,
        span: Duration,
    ) -> Vec<Expected> {
        let requests = due_evenly(n, first, span)
            .into_iter()
            .enumerate()
            .map(|(i, due)| {
                let body = serde_json::json!({
                    "topic": self.topic, "payload": {"n": i}, "run_at": due.to_rfc3339(),
                });
                async move {
                    let (status, job) = self.post_job(&body).await;
                    assert_eq!(status, 201, "create: {job}");
                    Expected {
                        id: job["id"].as_u64().unwrap(),
                        due_ms: due.timestamp_millis(),
                    }
                }
            });
        futures::stream::iter(requests)
            .buffer_unordered(16)
            .collect()
            .await
    }

    /// [`World::jobs_schedule`] through `POST /v1/jobs/batch`, 100 jobs a
    /// request: for tests whose timing needs every job created well before
    /// the first is due, however loaded the machine is.
    pub async fn jobs_schedule_batched(
        &self,
        n: usize,
        first: DateTime<Utc>,
        span: Duration,
    ) -> Vec<Expected> {
        let due = due_evenly(n, first, span);
        let mut expected = Vec::with_capacity(n);
        for (c, chunk) in due.chunks(100).enumerate() {
            let items: Vec<serde_json::Value> = chunk
                .iter()
                .enumerate()
                .map(|(i, due)| {
                    serde_json::json!({
                        "topic": self.topic, "payload": {"n": c * 100 + i},
                        "run_at": due.to_rfc3339(),
                    })
                })
                .collect();
            let response = self
                .http
                .post(format!("http://{}/v1/jobs/batch", self.http_addr))
                .json(&serde_json::json!({ "jobs": items }))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 200, "batch create");
            let answer: serde_json::Value = response.json().await.unwrap();
            for (item, due) in answer["results"].as_array().unwrap().iter().zip(chunk) {
                assert_eq!(item["result"], "created", "batch item: {item}");
                expected.push(Expected {
                    id: item["id"].as_u64().unwrap(),
                    due_ms: due.timestamp_millis(),
                });
            }
        }
        expected
    }

    pub async fn post_job(&self, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let response = self
            .http
            .post(format!("http://{}/v1/jobs", self.http_addr))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or_default())
    }

    /// A request to instance `i`'s API: `None` when it does not answer
    /// (killed, paused, restarting).
    pub async fn call(
        &self,
        i: usize,
        method: reqwest::Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Option<(u16, serde_json::Value)> {
        let mut request = self
            .http
            .request(method, format!("http://{}{path}", self.http_addrs[i]))
            .timeout(Duration::from_secs(3));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.ok()?;
        let status = response.status().as_u16();
        Some((status, response.json().await.unwrap_or_default()))
    }

    /// A job's history (`job_events`), one line per change, for a verdict
    /// that went wrong.
    pub async fn history(&self, id: u64) -> Vec<String> {
        let rows: Result<Vec<(chrono::NaiveDateTime, String, String, u32)>, _> = sqlx::query_as(
            "SELECT at, CAST(actor AS CHAR), CAST(status AS CHAR), attempt FROM job_events \
             WHERE job_id = ? ORDER BY id",
        )
        .bind(id)
        .fetch_all(&self.sql)
        .await;
        type Row = (String, String, Option<String>, Option<String>);
        let job: Result<Option<Row>, _> = sqlx::query_as(
            "SELECT CAST(status AS CHAR), CAST(schedule_time AS CHAR), \
                 CAST(dispatched_at AS CHAR), CAST(last_error AS CHAR) FROM jobs WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.sql)
        .await;
        let mut lines = match rows {
            Ok(rows) => rows
                .into_iter()
                .map(|(at, actor, status, attempt)| {
                    format!("{at} {actor} {status} attempt {attempt}")
                })
                .collect(),
            Err(err) => vec![format!("history unreadable: {err}")],
        };
        lines.push(match job {
            Ok(Some((status, due, dispatched, error))) => {
                format!("now {status}, due {due}, dispatched {dispatched:?}, last_error {error:?}")
            }
            Ok(None) => "no such row".to_owned(),
            Err(err) => format!("row unreadable: {err}"),
        });
        lines
    }

    /// Prints, for the first few lost jobs and unexplained duplicates, each
    /// copy seen and the job's history: where a broken promise came from.
    pub async fn explain(&self, verdict: &Verdict) {
        let seen = self.seen();
        let lost = verdict.lost.iter().take(5);
        let doubled = verdict
            .unexplained_duplicates
            .iter()
            .map(|(id, _)| id)
            .take(5);
        let early = verdict.early.iter().take(5);
        let cancelled = verdict.cancelled_produced.iter().take(5);
        let patched = verdict.patched_old_time.iter().take(5);
        for id in lost
            .chain(doubled)
            .chain(early)
            .chain(cancelled)
            .chain(patched)
        {
            let copies: Vec<String> = seen
                .iter()
                .filter(|s| s.id == *id)
                .map(|s| {
                    format!(
                        "attempt {} at {}/{} received {} scheduled {} dispatched {}",
                        s.attempt,
                        s.partition,
                        s.offset,
                        s.received_at_ms,
                        s.scheduled_at_ms,
                        s.dispatched_at_ms
                    )
                })
                .collect();
            eprintln!("job {id}: seen {copies:?}");
            for line in self.history(*id).await {
                eprintln!("job {id}:   {line}");
            }
        }
    }

    /// Reads the whole topic again with a fresh consumer, up to the end
    /// each partition has now, and returns every record with its position
    /// (`received_at_ms` is when this read saw it). tansu sometimes hands the
    /// live consumer a record twice at one position and skips a neighbour
    /// (a fetch that starts inside a multi-record batch); the audit tells
    /// what is really on the topic.
    pub async fn audit(&self) -> Vec<Seen> {
        use rdkafka::consumer::Consumer;
        let consumer = consumer_from_beginning(&self.services.brokers, &self.topic);
        let mut ends: HashMap<i32, i64> = HashMap::new();
        // A broker away (a fault under way): nothing read this time.
        let Ok(metadata) = consumer.fetch_metadata(Some(&self.topic), Duration::from_secs(10))
        else {
            return Vec::new();
        };
        for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
            let Ok((_, high)) =
                consumer.fetch_watermarks(&self.topic, partition.id(), Duration::from_secs(10))
            else {
                return Vec::new();
            };
            if high > 0 {
                ends.insert(partition.id(), high);
            }
        }
        let mut read: HashMap<i32, i64> = HashMap::new();
        let mut records = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while ends
            .iter()
            .any(|(p, end)| read.get(p).copied().unwrap_or(0) < *end)
            && tokio::time::Instant::now() < deadline
        {
            let Ok(Ok(message)) =
                tokio::time::timeout(Duration::from_secs(5), consumer.recv()).await
            else {
                continue;
            };
            read.insert(message.partition(), message.offset() + 1);
            let (Some(id), Some(attempt)) = (
                header(&message, "tickler-job-id"),
                header(&message, "tickler-attempt"),
            ) else {
                continue;
            };
            records.push(Seen {
                id: id.parse().unwrap(),
                attempt: attempt.parse().unwrap(),
                received_at_ms: Utc::now().timestamp_millis(),
                partition: message.partition(),
                offset: message.offset(),
                dispatched_at_ms: header(&message, "tickler-dispatched-at")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                scheduled_at_ms: header(&message, "tickler-scheduled-at")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            });
        }
        records
    }

    /// The records seen so far, completed by an audit read of the topic:
    /// a record at a position the live consumer never saw counts as
    /// arrived at its `tickler-dispatched-at` (its real arrival is unknown,
    /// and no earlier than that).
    pub async fn seen_audited(&self) -> Vec<Seen> {
        let mut seen = self.seen();
        let positions: HashSet<(i32, i64)> = seen.iter().map(|s| (s.partition, s.offset)).collect();
        let missed: Vec<Seen> = self
            .audit()
            .await
            .into_iter()
            .filter(|s| !positions.contains(&(s.partition, s.offset)))
            .map(|s| Seen {
                received_at_ms: s.dispatched_at_ms,
                ..s
            })
            .collect();
        if !missed.is_empty() {
            eprintln!(
                "audit: {} records on the topic the live consumer did not see (counted at their dispatch time)",
                missed.len()
            );
        }
        seen.extend(missed);
        seen
    }

    /// The records seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The records seen after the first `from`, and how many were seen in
    /// all: a long run reads what is new each time instead of everything.
    pub fn seen_from(&self, from: usize) -> (Vec<Seen>, usize) {
        let seen = self.seen.lock().unwrap();
        (seen.get(from..).unwrap_or_default().to_vec(), seen.len())
    }

    /// Waits until every id in `ids` has been seen, or `wait` passes; then a
    /// little longer, so late duplicates are counted too.
    /// The live consumer may skip a record tansu hands it twice at a
    /// neighbour's position (see [`World::audit`]), so while some stay
    /// unseen the topic is read again every ten seconds: a run whose
    /// records are all on the topic stops waiting, and its verdict reads
    /// them through [`World::seen_audited`].
    pub async fn await_seen(&self, ids: &HashSet<u64>, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        let mut audit_at = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let seen: HashSet<u64> = self.seen().iter().map(|s| s.id).collect();
            if ids.is_subset(&seen) {
                break;
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            if now >= audit_at {
                let audited: HashSet<u64> = self.audit().await.iter().map(|s| s.id).collect();
                if ids
                    .iter()
                    .all(|id| seen.contains(id) || audited.contains(id))
                {
                    break;
                }
                audit_at = tokio::time::Instant::now() + Duration::from_secs(10);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    /// Jobs whose dispatch a fault interrupted: tickler recorded why in
    /// `last_error` (claim expired, produce failed).
    pub async fn interrupted(&self) -> HashSet<u64> {
        let ids: Vec<u64> = sqlx::query_scalar("SELECT id FROM jobs WHERE last_error IS NOT NULL")
            .fetch_all(&self.sql)
            .await
            .unwrap();
        ids.into_iter().collect()
    }

    pub async fn finish(mut self) {
        self.finished = true;
        self.stop.cancel();
        self.tickler.stop();
        for other in &mut self.others {
            other.stop();
        }
        self.sql.close().await;
        let _ =
            scratch::scratch_database_drop(&self.services.mysql_server_url, &self.db_name).await;
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if !self.finished {
            self.stop.cancel();
            super::scratch_database_drop_blocking(
                self.services.mysql_server_url.clone(),
                self.db_name.clone(),
            );
        }
    }
}

async fn record(consumer: StreamConsumer, seen: Arc<Mutex<Vec<Seen>>>, stop: CancellationToken) {
    loop {
        let message = tokio::select! {
            _ = stop.cancelled() => return,
            message = consumer.recv() => message,
        };
        let Ok(message) = message else {
            // The broker may be down on purpose; the consumer reconnects.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let received_at_ms = Utc::now().timestamp_millis();
        let (Some(id), Some(attempt)) = (
            header(&message, "tickler-job-id"),
            header(&message, "tickler-attempt"),
        ) else {
            continue;
        };
        seen.lock().unwrap().push(Seen {
            id: id.parse().unwrap(),
            attempt: attempt.parse().unwrap(),
            received_at_ms,
            partition: message.partition(),
            offset: message.offset(),
            dispatched_at_ms: header(&message, "tickler-dispatched-at")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            scheduled_at_ms: header(&message, "tickler-scheduled-at")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        });
    }
}

/// What a run came to.
#[derive(Debug, Default)]
pub struct Verdict {
    pub jobs: usize,
    pub records: usize,
    pub lost: Vec<u64>,
    pub early: Vec<u64>,
    pub cancelled_produced: Vec<u64>,
    /// Jobs a PATCH answered 200 moved, of which a record arrived carrying
    /// an earlier `tickler-scheduled-at` than the time that PATCH set: the
    /// old time went out after all (see `check_moved`).
    pub patched_old_time: Vec<u64>,
    /// (job id, attempt) seen more than once, with a fault to explain it.
    pub explained_duplicates: Vec<(u64, u32)>,
    /// (job id, attempt) seen more than once with no interruption recorded.
    pub unexplained_duplicates: Vec<(u64, u32)>,
    pub lateness_p50_ms: i64,
    pub lateness_p99_ms: i64,
    pub lateness_max_ms: i64,
    /// The same at dispatch (`tickler-dispatched-at`), without the
    /// consumer's lag.
    pub dispatch_p50_ms: i64,
    pub dispatch_p99_ms: i64,
    pub dispatch_max_ms: i64,
}

impl Verdict {
    /// Panics with the whole verdict unless nothing was lost, early,
    /// wrongly produced, or duplicated without cause.
    pub fn assert_clean(&self, name: &str) {
        eprintln!(
            "fault {name}: jobs {} records {} lost {} early {} cancelled-but-produced {} \
             patched-but-old-time {} duplicates {} (unexplained {}) lateness p50 {} ms \
             p99 {} ms max {} ms (at dispatch p50 {} ms p99 {} ms max {} ms)",
            self.jobs,
            self.records,
            self.lost.len(),
            self.early.len(),
            self.cancelled_produced.len(),
            self.patched_old_time.len(),
            self.explained_duplicates.len() + self.unexplained_duplicates.len(),
            self.unexplained_duplicates.len(),
            self.lateness_p50_ms,
            self.lateness_p99_ms,
            self.lateness_max_ms,
            self.dispatch_p50_ms,
            self.dispatch_p99_ms,
            self.dispatch_max_ms,
        );
        assert!(
            self.lost.is_empty()
                && self.early.is_empty()
                && self.cancelled_produced.is_empty()
                && self.patched_old_time.is_empty()
                && self.unexplained_duplicates.is_empty(),
            "fault {name} broke a promise: lost {:?}, early {:?}, cancelled-but-produced {:?}, \
             patched-but-old-time {:?}, unexplained duplicates {:?} (first 20 of each)",
            first(&self.lost),
            first(&self.early),
            first(&self.cancelled_produced),
            first(&self.patched_old_time),
            first(&self.unexplained_duplicates),
        );
    }
}

fn first<T: Clone>(items: &[T]) -> Vec<T> {
    items.iter().take(20).cloned().collect()
}

/// Checks what was seen against what was expected. `cancelled` jobs must
/// never appear; every other expected job must appear, never before its due
/// time; a (job, attempt) may appear twice only for `interrupted` jobs.
pub fn check(
    expected: &[Expected],
    cancelled: &HashSet<u64>,
    interrupted: &HashSet<u64>,
    seen: &[Seen],
) -> Verdict {
    check_with(expected, cancelled, &HashSet::new(), interrupted, seen)
}

/// `check_with`, and for jobs moved by a PATCH answered 200 (`moved`: id →
/// the `run_at` the last such PATCH set, ms since the epoch): no record of
/// them may carry an earlier `tickler-scheduled-at` — the old time must
/// never go out, however late it would arrive. (`expected` already holds
/// their new times, so a record arriving before it is also early.)
pub fn check_moved(
    expected: &[Expected],
    cancelled: &HashSet<u64>,
    maybe_cancelled: &HashSet<u64>,
    moved: &HashMap<u64, i64>,
    interrupted: &HashSet<u64>,
    seen: &[Seen],
) -> Verdict {
    let mut verdict = check_with(expected, cancelled, maybe_cancelled, interrupted, seen);
    for s in seen {
        if let Some(run_at_ms) = moved.get(&s.id) {
            if s.scheduled_at_ms < *run_at_ms && !verdict.patched_old_time.contains(&s.id) {
                verdict.patched_old_time.push(s.id);
            }
        }
    }
    verdict
}

/// `check`, with jobs whose cancel is indeterminate (the request got no
/// answer: it may have been applied): they may arrive or not.
pub fn check_with(
    expected: &[Expected],
    cancelled: &HashSet<u64>,
    maybe_cancelled: &HashSet<u64>,
    interrupted: &HashSet<u64>,
    seen: &[Seen],
) -> Verdict {
    let due: HashMap<u64, i64> = expected.iter().map(|e| (e.id, e.due_ms)).collect();
    let mut first_seen: HashMap<u64, i64> = HashMap::new();
    let mut first_dispatched: HashMap<u64, i64> = HashMap::new();
    // A duplicate is a record produced twice: two positions on the topic.
    // Two copies at one position are the consumer reading it twice.
    let mut positions: BTreeMap<(u64, u32), HashSet<(i32, i64)>> = BTreeMap::new();
    let mut verdict = Verdict {
        jobs: expected.len(),
        records: seen.len(),
        ..Verdict::default()
    };
    for s in seen {
        positions
            .entry((s.id, s.attempt))
            .or_default()
            .insert((s.partition, s.offset));
        let first = first_seen.entry(s.id).or_insert(s.received_at_ms);
        *first = (*first).min(s.received_at_ms);
        let first = first_dispatched.entry(s.id).or_insert(s.dispatched_at_ms);
        *first = (*first).min(s.dispatched_at_ms);
        if let Some(due_ms) = due.get(&s.id) {
            if s.received_at_ms < *due_ms && !verdict.early.contains(&s.id) {
                verdict.early.push(s.id);
            }
        }
        if cancelled.contains(&s.id) && !verdict.cancelled_produced.contains(&s.id) {
            verdict.cancelled_produced.push(s.id);
        }
    }
    for ((id, attempt), at) in positions {
        if at.len() > 1 {
            if interrupted.contains(&id) {
                verdict.explained_duplicates.push((id, attempt));
            } else {
                verdict.unexplained_duplicates.push((id, attempt));
            }
        }
    }
    let mut lateness = Vec::new();
    let mut at_dispatch = Vec::new();
    for e in expected {
        if cancelled.contains(&e.id) {
            continue;
        }
        if let Some(at) = first_dispatched.get(&e.id) {
            at_dispatch.push(at - e.due_ms);
        }
        match first_seen.get(&e.id) {
            Some(at) => lateness.push(at - e.due_ms),
            None if maybe_cancelled.contains(&e.id) => {}
            None => verdict.lost.push(e.id),
        }
    }
    lateness.sort_unstable();
    at_dispatch.sort_unstable();
    let pick = |values: &[i64], q: f64| -> i64 {
        if values.is_empty() {
            0
        } else {
            values[((values.len() - 1) as f64 * q) as usize]
        }
    };
    verdict.lateness_p50_ms = pick(&lateness, 0.5);
    verdict.lateness_p99_ms = pick(&lateness, 0.99);
    verdict.lateness_max_ms = lateness.last().copied().unwrap_or(0);
    verdict.dispatch_p50_ms = pick(&at_dispatch, 0.5);
    verdict.dispatch_p99_ms = pick(&at_dispatch, 0.99);
    verdict.dispatch_max_ms = at_dispatch.last().copied().unwrap_or(0);
    verdict
}

/// `n` times spread evenly over [first, first + span).
fn due_evenly(n: usize, first: DateTime<Utc>, span: Duration) -> Vec<DateTime<Utc>> {
    let step_ms = span.as_millis() as i64 / n.max(1) as i64;
    (0..n)
        .map(|i| first + chrono::Duration::milliseconds(step_ms * i as i64))
        .collect()
}
