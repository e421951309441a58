//! Every metric tickler exports, named in one place, and the Prometheus
//! recorder behind `GET /metrics`.

use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

pub const JOBS_CREATED: &str = "tickler_jobs_created_total";
pub const JOBS_DISPATCHED: &str = "tickler_jobs_dispatched_total";
pub const DISPATCH_LATENESS: &str = "tickler_dispatch_lateness_seconds";
pub const DISPATCH_STAGE: &str = "tickler_dispatch_stage_seconds";
pub const DISPATCH_CAS_LOST: &str = "tickler_dispatch_cas_lost_total";
pub const PRODUCE_FAILED: &str = "tickler_produce_failed_total";
pub const LOADER_INDEXED: &str = "tickler_loader_indexed_total";
pub const INDEX_ERRORS: &str = "tickler_index_errors_total";
pub const STORE_ERRORS: &str = "tickler_store_errors_total";
pub const PASS_FAILURES: &str = "tickler_pass_failures_total";
pub const PRODUCER_RESTARTS: &str = "tickler_producer_restarts_total";
pub const INDEX_REBUILDS: &str = "tickler_index_rebuilds_total";
pub const RECONCILER_REFED: &str = "tickler_reconciler_refed_total";
pub const RECONCILER_RESCUED: &str = "tickler_reconciler_rescued_total";
pub const RESULTS_APPLIED: &str = "tickler_results_applied_total";
pub const RESULTS_IGNORED: &str = "tickler_results_ignored_total";
pub const RESULTS_MALFORMED: &str = "tickler_results_malformed_total";
pub const RESULTS_FAILED: &str = "tickler_results_failed_total";
pub const ACK_TIMEOUTS: &str = "tickler_ack_timeouts_total";
pub const JOBS_RETRIED: &str = "tickler_jobs_retried_total";
pub const JOBS_DEAD: &str = "tickler_jobs_dead_total";
pub const DEAD_LETTERS_PRODUCED: &str = "tickler_dead_letters_produced_total";
pub const JOBS_PURGED: &str = "tickler_jobs_purged_total";
pub const JOBS_UNKNOWN_TOPIC: &str = "tickler_jobs_unknown_topic_total";
pub const PRODUCE_REFUSED: &str = "tickler_produce_refused_total";
pub const API_CONNECTIONS: &str = "tickler_api_connections";
pub const API_REFUSED: &str = "tickler_api_refused_total";
pub const INSTANCES_LIVE: &str = "tickler_instances_live";
pub const SHARDS: &str = "tickler_shards";
pub const SHARDS_OWNED: &str = "tickler_shards_owned";
pub const SHARD_TAKEOVERS: &str = "tickler_shard_takeovers_total";
pub const DISPATCH_FENCED: &str = "tickler_dispatch_fenced_total";
pub const MEMBERSHIP_FAILURES: &str = "tickler_membership_failures_total";
pub const DEAD_INSTANCE_RESCUED: &str = "tickler_dead_instance_rescued_total";
pub const INSTANCE_LAPSES: &str = "tickler_instance_lapses_total";
pub const DOUBTS_SETTLED: &str = "tickler_doubts_settled_total";
pub const DOUBTS_UNSETTLED: &str = "tickler_doubts_unsettled_total";
pub const DISPATCH_WITHHELD: &str = "tickler_dispatch_withheld_total";
pub const JOBS_UNREADABLE: &str = "tickler_jobs_unreadable_total";
pub const INGRESS_REQUESTS: &str = "tickler_ingress_requests_total";
pub const INGRESS_REFUSED: &str = "tickler_ingress_refused_total";
pub const INGRESS_REPLIES_FAILED: &str = "tickler_ingress_replies_failed_total";
// Gauges from the truth (src/truth.rs): one instance reports them, every
// other reports 0.
pub const TRUTH_JOBS: &str = "tickler_jobs";
pub const TRUTH_OVERDUE: &str = "tickler_jobs_overdue";
pub const TRUTH_OVERDUE_OLDEST: &str = "tickler_jobs_overdue_oldest_seconds";
pub const TRUTH_WINDOW_JOBS: &str = "tickler_window_jobs";
pub const TRUTH_INDEX_JOBS: &str = "tickler_index_jobs";
pub const TRUTH_INDEX_DRIFT: &str = "tickler_index_drift";
pub const TRUTH_RESULTS_LAG: &str = "tickler_results_lag";
pub const TRUTH_INGRESS_LAG: &str = "tickler_ingress_lag";
pub const TRUTH_NEXT_DUE: &str = "tickler_next_due_seconds";
pub const TRUTH_SCAN: &str = "tickler_truth_scan_seconds";
pub const TRUTH_REPORTER: &str = "tickler_truth_reporter";
pub const TRUTH_COMPUTED: &str = "tickler_truth_computed_timestamp_seconds";
pub const NOTIFY_FAILED: &str = "tickler_notify_failed_total";
pub const TRUTH_DISPATCHERS_LIVE: &str = "tickler_dispatchers_live";
pub const TRUTH_SCHEDULES: &str = "tickler_schedules";
pub const TRUTH_SCHEDULES_BEHIND: &str = "tickler_schedules_behind";
pub const TRUTH_TOPICS_PAUSED: &str = "tickler_topics_paused";
pub const DISPATCH_PACED: &str = "tickler_dispatch_paced_total";
pub const DISPATCH_HELD: &str = "tickler_dispatch_held_total";
pub const SCHEDULE_OCCURRENCES: &str = "tickler_schedule_occurrences_total";
pub const SCHEDULE_MISFIRES_SKIPPED: &str = "tickler_schedule_misfires_skipped_total";
/// The process's own, under the names Prometheus's client libraries use.
pub const PROCESS_RSS: &str = "process_resident_memory_bytes";
pub const PROCESS_FDS: &str = "process_open_fds";

/// Installs the process-wide recorder once and returns the handle that
/// renders it. Later calls (several servers in one test process) share it.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(DISPATCH_LATENESS.to_owned()),
                    &[
                        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0,
                    ],
                )
                .map(|builder| builder.build_recorder())
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            // Fails only if another recorder is installed; then ours renders
            // nothing, which beats refusing to start.
            let _ = metrics::set_global_recorder(recorder);
            describe();
            upkeep_start(handle.clone());
            handle
        })
        .clone()
}

/// How often the histograms' samples are folded into their buckets and
/// summaries.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// A histogram keeps every sample recorded until the recorder folds them
/// in, which it otherwise does only when `/metrics` is scraped: unscraped,
/// the per-job samples (lateness, the hold stage) grew tickler's memory
/// with every job (#28). A thread of its own folds them in every few
/// seconds, runtime or not, and samples the process's memory and open
/// files.
fn upkeep_start(handle: PrometheusHandle) {
    let started = std::thread::Builder::new()
        .name("metrics-upkeep".to_owned())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_EVERY);
            handle.run_upkeep();
            process_sample();
        });
    if let Err(err) = started {
        tracing::warn!(error = %err, "cannot start the metrics upkeep; histograms grow until /metrics is scraped");
    }
}

/// Resident memory and open files, from /proc where there is one.
fn process_sample() {
    let rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        });
    if let Some(kib) = rss_kib {
        gauge!(PROCESS_RSS).set(kib * 1024.0);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        gauge!(PROCESS_FDS).set(fds.count() as f64);
    }
}

/// Long because it is a table: one description per metric (grouped by
/// what they watch, not in the order of the names above). Split, it would
/// only be scattered.
fn describe() {
    describe_gauge!(
        PROCESS_RSS,
        "Resident memory of this process, in bytes (Linux)."
    );
    describe_gauge!(
        PROCESS_FDS,
        "Open file descriptors of this process (Linux)."
    );
    describe_counter!(JOBS_CREATED, "Jobs accepted by the API.");
    describe_gauge!(
        API_CONNECTIONS,
        "Connections the API holds open (at most api_max_connections)."
    );
    describe_counter!(
        API_REFUSED,
        "Requests refused before any work: 401, 403, 429, by code."
    );
    describe_counter!(
        JOBS_UNKNOWN_TOPIC,
        "Jobs created for a topic the broker does not have (topic_check = warn), or found so by the dispatcher, by topic."
    );
    describe_counter!(
        PRODUCE_REFUSED,
        "Sends refused for the job's own sake (missing topic, record too large, not authorised...): a failed attempt each, by topic and reason."
    );
    describe_counter!(
        JOBS_DISPATCHED,
        "Jobs produced to Kafka and marked dispatched."
    );
    describe_histogram!(
        DISPATCH_LATENESS,
        Unit::Seconds,
        "Dispatch time minus schedule time, per job."
    );
    describe_histogram!(
        DISPATCH_STAGE,
        Unit::Seconds,
        "Time spent per dispatch stage: claim (Redis, per pass), cas (MySQL compare-and-set, per pass), hold (per job: from the claim to its time, how far ahead it was claimed), ack (per group of records: sent to all acknowledged), mark (per settle: recording outcomes in MySQL and Redis)."
    );
    describe_counter!(
        DISPATCH_CAS_LOST,
        "Ids Redis offered that MySQL refused (cancelled, moved, done, or not yet due)."
    );
    describe_counter!(
        PRODUCE_FAILED,
        "Jobs the broker did not accept; they go back to pending."
    );
    describe_counter!(LOADER_INDEXED, "Jobs the loader put in the Redis window.");
    describe_counter!(
        RESULTS_APPLIED,
        "Result reports applied, by channel (topic, http) and outcome."
    );
    describe_counter!(
        RESULTS_IGNORED,
        "Result reports that changed nothing, by channel and reason (stale_attempt, finished, not_expected, not_dispatched, unknown_job)."
    );
    describe_counter!(
        RESULTS_MALFORMED,
        "Records on the results topic that are not a valid report; skipped."
    );
    describe_counter!(
        RESULTS_FAILED,
        "Reports from the results topic the database refused three times (not for being down); logged and skipped."
    );
    describe_counter!(
        ACK_TIMEOUTS,
        "Dispatched jobs whose ack deadline passed without a result."
    );
    describe_counter!(
        JOBS_RETRIED,
        "Jobs sent back to pending for another attempt."
    );
    describe_counter!(JOBS_DEAD, "Jobs that ended dead.");
    describe_counter!(DEAD_LETTERS_PRODUCED, "Dead-letter records produced.");
    describe_counter!(
        JOBS_PURGED,
        "Finished jobs deleted after retention_days, with their history."
    );
    describe_counter!(
        INDEX_ERRORS,
        "Redis operations that failed (repaired later from MySQL)."
    );
    describe_counter!(
        STORE_ERRORS,
        "MySQL operations of a background role that failed, by what was being done (tried again on its next pass)."
    );
    describe_counter!(
        PASS_FAILURES,
        "Passes of a background role that failed for another reason than MySQL or Redis (a Kafka producer that cannot be made, say), by pass (tried again on the next)."
    );
    describe_counter!(
        PRODUCER_RESTARTS,
        "Kafka producers replaced because every send failed for several batches, or librdkafka reported them fatally failed."
    );
    describe_counter!(
        INDEX_REBUILDS,
        "Times the loader found the Redis window lost (flush, restart) and rebuilt it."
    );
    describe_counter!(
        RECONCILER_REFED,
        "Overdue pending jobs the reconciler found missing from Redis and indexed again."
    );
    describe_counter!(
        RECONCILER_RESCUED,
        "Claims in doubt (lease expired, instance dead, send timed out) whose record the read-back did not find on Kafka: returned to pending, to be produced again."
    );
    describe_counter!(
        DOUBTS_SETTLED,
        "Claims in doubt settled by reading their topic back, by what was found: outcome=produced (marked dispatched at the record's position) or outcome=absent (pending again)."
    );
    describe_counter!(
        DOUBTS_UNSETTLED,
        "Claims in doubt a reconciler pass could not settle because Kafka could not be read in time; they stay dispatching (a cancel answers in_flight) until a later pass."
    );
    describe_counter!(
        DISPATCH_WITHHELD,
        "Claimed jobs the dispatcher did not send, by reason: lease (this instance's heartbeat or the claim's send deadline ran out) or paused (the topic was paused since the claim). They go back to pending."
    );
    describe_counter!(
        INGRESS_REQUESTS,
        "Records of a request topic taken by the ingress, by request topic and outcome (created, existing, moved, cancelled, too_late, in_flight, error)."
    );
    describe_counter!(
        INGRESS_REFUSED,
        "Requests the ingress answered with an error, by request topic and the error's code."
    );
    describe_counter!(
        INGRESS_REPLIES_FAILED,
        "Ingress replies the reply topic did not acknowledge; the requests themselves were written."
    );
    describe_gauge!(
        TRUTH_INGRESS_LAG,
        "Records of a request topic the ingress's consumer group has not yet committed, by request topic (-1: not read)."
    );
    describe_counter!(
        JOBS_UNREADABLE,
        "Claimed jobs whose row did not decode (a hand edit the column accepted): set aside as dead, named by tickler doctor."
    );
    describe_gauge!(
        INSTANCES_LIVE,
        "Instances whose heartbeat is within instance_ttl_ms, as this instance last saw them."
    );
    describe_gauge!(
        SHARDS,
        "The deployment's shard count (rows of shard_leases)."
    );
    describe_gauge!(SHARDS_OWNED, "Shards this instance's dispatcher holds.");
    describe_counter!(
        SHARD_TAKEOVERS,
        "Shards this instance took: free ones, or a dead instance's."
    );
    describe_counter!(
        DISPATCH_FENCED,
        "Claimed ids this instance's compare-and-set refused because it no longer held their shard (paused past its TTL, or rebalanced)."
    );
    describe_counter!(
        MEMBERSHIP_FAILURES,
        "Membership rounds (heartbeat, balance, rescue) that failed, mostly for MySQL."
    );
    describe_counter!(
        INSTANCE_LAPSES,
        "Heartbeats of this instance that found its last one older than instance_ttl_ms (or its row gone): the others may have taken it for dead, so it sends nothing it claimed before (a paused process, a stalled runtime, a partition)."
    );
    describe_counter!(
        DEAD_INSTANCE_RESCUED,
        "Jobs a dead instance held in dispatching, put in doubt without waiting for the claim lease: read back after kafka_message_timeout_ms, then produced again if not found."
    );
    describe_gauge!(
        TRUTH_JOBS,
        "Jobs by status (pending, dispatching, dispatched, dead) and topic, from MySQL; topics past gauge_topics_max are summed under topic=\"_other\". Reported by one instance (tickler_truth_reporter = 1), 0 elsewhere."
    );
    describe_gauge!(
        TRUTH_OVERDUE,
        "Pending jobs whose run time has passed (due, not yet dispatched), from MySQL."
    );
    describe_gauge!(
        TRUTH_OVERDUE_OLDEST,
        Unit::Seconds,
        "Age of the oldest overdue pending job (0 when none)."
    );
    describe_gauge!(
        TRUTH_WINDOW_JOBS,
        "Jobs the Redis index should hold by MySQL: pending within window_ms, and dispatching."
    );
    describe_gauge!(
        TRUTH_INDEX_JOBS,
        "Entries in the Redis index (due and in flight)."
    );
    describe_gauge!(TRUTH_INDEX_DRIFT, "tickler_window_jobs - tickler_index_jobs: positive when Redis lacks jobs MySQL says it should hold; a few in transit is normal.");
    describe_gauge!(TRUTH_RESULTS_LAG, "Records on the results topic tickler's consumer group has not consumed (-1: could not be read).");
    describe_gauge!(
        TRUTH_NEXT_DUE,
        Unit::Seconds,
        "Until the next pending job is due (negative: overdue; +Inf: none pending)."
    );
    describe_gauge!(TRUTH_COMPUTED, Unit::Seconds, "Unix time of the reporter's last successful computation: time() minus this is how stale the gauges are (they keep their values while MySQL does not answer).");
    describe_gauge!(
        TRUTH_SCAN,
        Unit::Seconds,
        "How long the last computation of these gauges took."
    );
    describe_gauge!(
        TRUTH_REPORTER,
        "1 on the instance reporting the gauges from the truth, 0 on the others."
    );
    describe_counter!(NOTIFY_FAILED, "Notifications the webhook (notify_webhook_url) did not take; each is sent again next round.");
    describe_gauge!(
        TRUTH_SCHEDULES,
        "Recurring schedules by status (active, paused, ended). Reporter instance only."
    );
    describe_gauge!(TRUTH_SCHEDULES_BEHIND, "Active schedules whose next occurrence is over a minute past its time and still not a job: no instance runs the loader role (the materializer), or it fails. Reporter instance only.");
    describe_gauge!(
        TRUTH_TOPICS_PAUSED,
        "Topics paused (their due jobs are held). Reporter instance only."
    );
    describe_counter!(DISPATCH_PACED, "Due jobs of a paced topic (max_per_second) held back and spread at its rate, by topic; a job held twice counts twice.");
    describe_counter!(DISPATCH_HELD, "Due jobs the claim refused to produce: reason=paused (their topic is; out of Redis until it resumes) or expired (a skip schedule's occurrence past its misfire grace; cancelled).");
    describe_counter!(
        SCHEDULE_OCCURRENCES,
        "Occurrences of recurring schedules created as jobs."
    );
    describe_counter!(SCHEDULE_MISFIRES_SKIPPED, "Occurrences missed while no tickler ran that their schedule's misfire policy did not create.");
    describe_gauge!(
        TRUTH_DISPATCHERS_LIVE,
        "Live instances running the dispatcher role, from the instances table."
    );
}

/// What the reporter publishes; the default (all zero) is what every
/// other instance publishes.
#[derive(Debug, Clone, Default)]
pub struct TruthGauges {
    pub reporter: bool,
    pub overdue: u64,
    pub overdue_oldest_s: f64,
    pub window_jobs: u64,
    /// None: Redis did not answer; the index gauges keep their last value.
    pub index_jobs: Option<u64>,
    /// None: not read; published as -1.
    pub results_lag: Option<i64>,
    /// None: nothing pending; published as +Inf.
    pub next_due_s: Option<f64>,
    pub dispatchers_live: usize,
    pub schedules: crate::store::ScheduleStats,
    pub scan_s: f64,
}

pub fn truth_jobs(status: &str, topic: &str, count: u64) {
    gauge!(TRUTH_JOBS, "status" => status.to_owned(), "topic" => topic.to_owned())
        .set(count as f64);
}

pub fn truth_publish(g: &TruthGauges) {
    gauge!(TRUTH_REPORTER).set(if g.reporter { 1.0 } else { 0.0 });
    gauge!(TRUTH_OVERDUE).set(g.overdue as f64);
    gauge!(TRUTH_OVERDUE_OLDEST).set(g.overdue_oldest_s);
    gauge!(TRUTH_WINDOW_JOBS).set(g.window_jobs as f64);
    match (g.reporter, g.index_jobs) {
        (true, Some(redis)) => {
            gauge!(TRUTH_INDEX_JOBS).set(redis as f64);
            gauge!(TRUTH_INDEX_DRIFT).set(g.window_jobs as f64 - redis as f64);
        }
        (true, None) => {}
        (false, _) => {
            gauge!(TRUTH_INDEX_JOBS).set(0.0);
            gauge!(TRUTH_INDEX_DRIFT).set(0.0);
        }
    }
    let or = |v: Option<f64>, none: f64| if g.reporter { v.unwrap_or(none) } else { 0.0 };
    gauge!(TRUTH_RESULTS_LAG).set(or(g.results_lag.map(|l| l as f64), -1.0));
    // Nothing pending: the next due job is infinitely far (`+Inf`).
    gauge!(TRUTH_NEXT_DUE).set(or(g.next_due_s, f64::INFINITY));
    if g.reporter {
        gauge!(TRUTH_COMPUTED).set(chrono::Utc::now().timestamp_millis() as f64 / 1000.0);
    }
    gauge!(TRUTH_DISPATCHERS_LIVE).set(g.dispatchers_live as f64);
    for (status, n) in [
        ("active", g.schedules.active),
        ("paused", g.schedules.paused),
        ("ended", g.schedules.ended),
    ] {
        gauge!(TRUTH_SCHEDULES, "status" => status).set(n as f64);
    }
    gauge!(TRUTH_SCHEDULES_BEHIND).set(g.schedules.behind as f64);
    gauge!(TRUTH_TOPICS_PAUSED).set(g.schedules.topics_paused as f64);
    gauge!(TRUTH_SCAN).set(g.scan_s);
}

/// Distinct topics a counter labelled by topic names at most, in a process:
/// with `topic_check = warn` or `off` a caller may name any topic, and each
/// name would be a series of its own for good. Past it, topics are counted
/// under `_other`, as the truth's gauges sum the topics past theirs.
pub const TOPIC_LABELS_MAX: usize = 200;

/// `topic` as a label: itself while fewer than [`TOPIC_LABELS_MAX`] topics
/// have been, else `_other`.
fn topic_label(topic: &str) -> String {
    static SEEN: OnceLock<std::sync::Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if seen.contains(topic) {
        return topic.to_owned();
    }
    if seen.len() < TOPIC_LABELS_MAX {
        seen.insert(topic.to_owned());
        return topic.to_owned();
    }
    "_other".to_owned()
}

/// Jobs of a paced topic held back for later, by topic.
pub fn dispatch_paced(topic: &str, n: usize) {
    counter!(DISPATCH_PACED, "topic" => topic_label(topic)).increment(n as u64);
}

/// Due jobs the compare-and-set refused to produce: `paused` (their topic
/// is) or `expired` (past a skip schedule's misfire grace; cancelled).
pub fn dispatch_held(reason: &'static str, n: usize) {
    counter!(DISPATCH_HELD, "reason" => reason).increment(n as u64);
}

/// Occurrences of schedules created as jobs.
pub fn schedule_occurrences(n: usize) {
    counter!(SCHEDULE_OCCURRENCES).increment(n as u64);
}

/// Missed occurrences not created, as their schedule's policy said.
pub fn schedule_misfires_skipped(n: u64) {
    counter!(SCHEDULE_MISFIRES_SKIPPED).increment(n);
}

pub fn notify_failed() {
    counter!(NOTIFY_FAILED).increment(1);
}

pub fn instances_live(n: usize) {
    gauge!(INSTANCES_LIVE).set(n as f64);
}

pub fn shards(n: u32) {
    gauge!(SHARDS).set(f64::from(n));
}

pub fn shards_owned(n: usize) {
    gauge!(SHARDS_OWNED).set(n as f64);
}

pub fn shards_acquired(n: usize) {
    counter!(SHARD_TAKEOVERS).increment(n as u64);
}

pub fn dispatch_fenced(n: usize) {
    if n > 0 {
        counter!(DISPATCH_FENCED).increment(n as u64);
    }
}

pub fn membership_failed() {
    counter!(MEMBERSHIP_FAILURES).increment(1);
}

pub fn instance_lapsed() {
    counter!(INSTANCE_LAPSES).increment(1);
}

pub fn dead_instance_rescued(n: usize) {
    if n > 0 {
        counter!(DEAD_INSTANCE_RESCUED).increment(n as u64);
    }
}

pub fn doubts_settled(produced: usize, absent: usize) {
    if produced > 0 {
        counter!(DOUBTS_SETTLED, "outcome" => "produced").increment(produced as u64);
    }
    if absent > 0 {
        counter!(RECONCILER_RESCUED).increment(absent as u64);
        counter!(DOUBTS_SETTLED, "outcome" => "absent").increment(absent as u64);
    }
}

pub fn doubts_unsettled(n: usize) {
    counter!(DOUBTS_UNSETTLED).increment(n as u64);
}

pub fn dispatch_withheld(reason: &'static str, n: usize) {
    if n > 0 {
        counter!(DISPATCH_WITHHELD, "reason" => reason).increment(n as u64);
    }
}

/// A request taken by the ingress, by request topic and outcome.
pub fn ingress_requests(topic: &str, outcome: &'static str, n: usize) {
    counter!(INGRESS_REQUESTS, "topic" => topic.to_owned(), "outcome" => outcome)
        .increment(n as u64);
}

/// A request the ingress refused, by request topic and code.
pub fn ingress_refused(topic: &str, code: &'static str) {
    counter!(INGRESS_REFUSED, "topic" => topic.to_owned(), "code" => code).increment(1);
}

pub fn ingress_replies_failed(n: usize) {
    counter!(INGRESS_REPLIES_FAILED).increment(n as u64);
}

/// The ingress group's lag on each request topic (-1: not read); 0 on
/// instances that do not report.
pub fn truth_ingress_lag(reporter: bool, lags: &[(String, Option<i64>)]) {
    for (topic, lag) in lags {
        let value = match (reporter, lag) {
            (false, _) => 0.0,
            (true, Some(lag)) => *lag as f64,
            (true, None) => -1.0,
        };
        gauge!(TRUTH_INGRESS_LAG, "topic" => topic.clone()).set(value);
    }
}

pub fn jobs_unreadable(n: usize) {
    if n > 0 {
        counter!(JOBS_UNREADABLE).increment(n as u64);
    }
}

pub fn job_created() {
    counter!(JOBS_CREATED).increment(1);
}

pub fn jobs_created(n: usize) {
    counter!(JOBS_CREATED).increment(n as u64);
}

pub fn dispatched(n: usize) {
    counter!(JOBS_DISPATCHED).increment(n as u64);
}

pub fn dispatch_lateness(scheduled: DateTime<Utc>, dispatched: DateTime<Utc>) {
    let seconds = (dispatched - scheduled).num_milliseconds().max(0) as f64 / 1000.0;
    histogram!(DISPATCH_LATENESS).record(seconds);
}

pub fn dispatch_stage(stage: &'static str, spent: std::time::Duration) {
    histogram!(DISPATCH_STAGE, "stage" => stage).record(spent.as_secs_f64());
}

pub fn dispatch_cas_lost(n: usize) {
    if n > 0 {
        counter!(DISPATCH_CAS_LOST).increment(n as u64);
    }
}

pub fn produce_failed(n: usize) {
    counter!(PRODUCE_FAILED).increment(n as u64);
}

pub fn loader_indexed(n: usize) {
    counter!(LOADER_INDEXED).increment(n as u64);
}

/// A job accepted for, or found due on, a topic the broker does not have.
pub fn job_unknown_topic(topic: &str) {
    counter!(JOBS_UNKNOWN_TOPIC, "topic" => topic_label(topic)).increment(1);
}

/// A send refused because of the job (not the broker's health).
pub fn produce_refused(topic: &str, reason: &'static str) {
    counter!(PRODUCE_REFUSED, "topic" => topic_label(topic), "reason" => reason).increment(1);
}

/// A Redis operation failed: counted and logged here, alike at every site.
/// Harmless for correctness — MySQL has the truth, and the loader, the
/// reconciler and the claim leases repair the index — but it costs latency.
pub fn index_failed(what: &'static str, num_jobs: usize, error: &dyn std::fmt::Display) {
    counter!(INDEX_ERRORS).increment(1);
    tracing::warn!(what, num_jobs, error = %error, "redis operation failed");
}

/// A background role's MySQL operation failed: counted by `what` (a fixed
/// word naming the step) and logged; the role tries again on its next pass.
pub fn store_failed(what: &'static str, error: &dyn std::fmt::Display) {
    counter!(STORE_ERRORS, "what" => what).increment(1);
    tracing::warn!(what, error = %error, "mysql operation failed");
}

/// A background role's pass failed for another reason than MySQL or
/// Redis: counted by `what` (the pass's fixed name) and logged; the role
/// tries again on its next pass.
pub fn pass_failed(what: &'static str, error: &dyn std::fmt::Display) {
    counter!(PASS_FAILURES, "what" => what).increment(1);
    tracing::warn!(what, error = %error, "pass failed");
}

pub fn index_rebuilt() {
    counter!(INDEX_REBUILDS).increment(1);
}

pub fn reconciler_refed(n: u64) {
    if n > 0 {
        counter!(RECONCILER_REFED).increment(n);
    }
}

pub fn producer_restarted() {
    counter!(PRODUCER_RESTARTS).increment(1);
}

pub fn result_applied(channel: &'static str, outcome: &'static str) {
    counter!(RESULTS_APPLIED, "channel" => channel, "outcome" => outcome).increment(1);
}

pub fn result_ignored(channel: &'static str, reason: &'static str) {
    counter!(RESULTS_IGNORED, "channel" => channel, "reason" => reason).increment(1);
}

pub fn result_malformed() {
    counter!(RESULTS_MALFORMED).increment(1);
}

pub fn ack_timeouts(n: usize) {
    if n > 0 {
        counter!(ACK_TIMEOUTS).increment(n as u64);
    }
}

pub fn jobs_retried(n: usize) {
    if n > 0 {
        counter!(JOBS_RETRIED).increment(n as u64);
    }
}

pub fn jobs_dead(n: usize) {
    if n > 0 {
        counter!(JOBS_DEAD).increment(n as u64);
    }
}

pub fn dead_letters_produced(n: usize) {
    if n > 0 {
        counter!(DEAD_LETTERS_PRODUCED).increment(n as u64);
    }
}

pub fn result_failed() {
    counter!(RESULTS_FAILED).increment(1);
}

pub fn jobs_purged(n: u64) {
    if n > 0 {
        counter!(JOBS_PURGED).increment(n);
    }
}

pub fn api_connection_opened() {
    gauge!(API_CONNECTIONS).increment(1.0);
}

pub fn api_connection_closed() {
    gauge!(API_CONNECTIONS).decrement(1.0);
}

/// A request refused for who sent it or how often (`code`: the error's).
pub fn api_refused(code: &'static str) {
    counter!(API_REFUSED, "code" => code).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_labels_are_bounded_and_a_topic_keeps_its_own() {
        let first = "label-test-first";
        assert_eq!(topic_label(first), first);
        let labels: Vec<String> = (0..TOPIC_LABELS_MAX + 5)
            .map(|i| topic_label(&format!("label-test-{i}")))
            .collect();
        assert!(labels.iter().any(|label| label == "_other"));
        let own = labels.iter().filter(|label| *label != "_other").count();
        assert!(own < TOPIC_LABELS_MAX, "{own}");
        assert_eq!(topic_label(first), first, "seen before the cap: kept");
    }
}
