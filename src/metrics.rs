//! Every metric tickler exports, declared once, and the Prometheus
//! recorder behind `GET /metrics`.
//!
//! A metric is one entry of the `declare!` table below: its name, type,
//! unit, label names, help text and (for a histogram) buckets. The table
//! gives a typed handle per metric (`JOBS_CREATED: Counter<0>`,
//! `PRODUCE_REFUSED: Counter<2>`: the label values each use must give) and
//! [`METRICS`], which the recorder's descriptions and buckets, the check of
//! docs/metrics.md and tests/deploy.rs read. The rest of the code base never
//! names a metric: it calls the event functions below, which count (and,
//! for an event that is also logged, write its log line) in one call.

use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use metrics::{KeyName, Label, SharedString, Unit};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// What a metric is to the recorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric as declared: an entry of [`METRICS`].
#[derive(Debug, Clone, Copy)]
pub struct Declared {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<Unit>,
    /// The label names, in the order every series gives them.
    pub labels: &'static [&'static str],
    /// A histogram's buckets. A histogram without is exported as a summary
    /// (quantiles), which needs no bounds chosen in advance.
    pub buckets: &'static [f64],
    pub help: &'static str,
}

impl Declared {
    /// The `# TYPE` Prometheus reads for it.
    pub fn exported_type(&self) -> &'static str {
        match self.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram if self.buckets.is_empty() => "summary",
            Kind::Histogram => "histogram",
        }
    }
}

/// A declared counter with `N` labels.
#[derive(Debug)]
pub struct Counter<const N: usize> {
    pub name: &'static str,
    pub labels: [&'static str; N],
}

/// A declared gauge with `N` labels.
#[derive(Debug)]
pub struct Gauge<const N: usize> {
    pub name: &'static str,
    pub labels: [&'static str; N],
}

/// A declared histogram with `N` labels.
#[derive(Debug)]
pub struct Histogram<const N: usize> {
    pub name: &'static str,
    pub labels: [&'static str; N],
}

/// The labels of one series: the declared names with the values given, in
/// the declared order (the order Prometheus shows them in).
fn labelled<const N: usize>(names: &[&'static str; N], values: [SharedString; N]) -> Vec<Label> {
    names
        .iter()
        .zip(values)
        .map(|(name, value)| Label::new(*name, value))
        .collect()
}

// Private, so that a metric is recorded only by an event function of this
// file. `get` is the one series of a metric without labels; `with`, the
// series of these label values.
impl Counter<0> {
    fn get(&self) -> metrics::Counter {
        metrics::counter!(self.name)
    }
}

impl<const N: usize> Counter<N> {
    fn with(&self, values: [SharedString; N]) -> metrics::Counter {
        metrics::counter!(self.name, labelled(&self.labels, values))
    }
}

impl Gauge<0> {
    fn get(&self) -> metrics::Gauge {
        metrics::gauge!(self.name)
    }
}

impl<const N: usize> Gauge<N> {
    fn with(&self, values: [SharedString; N]) -> metrics::Gauge {
        metrics::gauge!(self.name, labelled(&self.labels, values))
    }
}

impl Histogram<0> {
    fn get(&self) -> metrics::Histogram {
        metrics::histogram!(self.name)
    }
}

impl<const N: usize> Histogram<N> {
    fn with(&self, values: [SharedString; N]) -> metrics::Histogram {
        metrics::histogram!(self.name, labelled(&self.labels, values))
    }
}

/// Declares every metric: a typed handle (`pub const`, documented with its
/// help text) each, and [`METRICS`], the table of them all. `unit`,
/// `labels` and `buckets` are optional, in that order.
macro_rules! declare {
    ($(
        $id:ident = $kind:ident {
            name: $name:literal,
            $(unit: $unit:ident,)?
            $(labels: [$($label:literal),+ $(,)?],)?
            $(buckets: [$($bucket:literal),+ $(,)?],)?
            help: $help:literal $(,)?
        },
    )+) => {
        $(
            #[doc = $help]
            pub const $id: $kind<{ <[&str]>::len(&[$($($label),+)?]) }> =
                $kind { name: $name, labels: [$($($label),+)?] };
        )+

        /// Every metric tickler exports, in the order declared.
        pub static METRICS: &[Declared] = &[$(
            Declared {
                name: $name,
                kind: Kind::$kind,
                unit: declare!(@unit $($unit)?),
                labels: &[$($($label),+)?],
                buckets: &[$($($bucket),+)?],
                help: $help,
            },
        )+];
    };
    (@unit) => { None };
    (@unit $unit:ident) => { Some(Unit::$unit) };
}

// Long help texts are broken with `\`, which joins the lines with the one
// space before it: what Prometheus shows is one line.
declare! {
    // Jobs coming in: the API and the ingress.
    JOBS_CREATED = Counter {
        name: "tickler_jobs_created_total",
        help: "Jobs accepted by the API.",
    },
    API_CONNECTIONS = Gauge {
        name: "tickler_api_connections",
        help: "Connections the API holds open (at most api.max_connections).",
    },
    API_REFUSED = Counter {
        name: "tickler_api_refused_total",
        labels: ["code"],
        help: "Requests refused before any work: 401, 403, 429, by code.",
    },
    JOBS_UNKNOWN_TOPIC = Counter {
        name: "tickler_jobs_unknown_topic_total",
        labels: ["topic"],
        help: "Jobs created for a topic the broker does not have \
            (kafka.topic_check = warn), or found so by the dispatcher, by topic.",
    },
    INGRESS_REQUESTS = Counter {
        name: "tickler_ingress_requests_total",
        labels: ["topic", "outcome"],
        help: "Records of a request topic taken by the ingress, by request \
            topic and outcome (created, existing, moved, cancelled, too_late, \
            in_flight, error).",
    },
    INGRESS_REFUSED = Counter {
        name: "tickler_ingress_refused_total",
        labels: ["topic", "code"],
        help: "Requests the ingress answered with an error, by request topic \
            and the error's code.",
    },
    INGRESS_PARTITIONS = Gauge {
        name: "tickler_ingress_partitions",
        help: "Request partitions this instance reads (its share of its \
            ingress.group's).",
    },
    INGRESS_REPLIES_FAILED = Counter {
        name: "tickler_ingress_replies_failed_total",
        help: "Ingress replies the reply topic did not acknowledge; the \
            requests themselves were written.",
    },

    // The dispatcher: claims, sends, and what held jobs back.
    JOBS_DISPATCHED = Counter {
        name: "tickler_jobs_dispatched_total",
        help: "Jobs produced to Kafka and marked dispatched.",
    },
    DISPATCH_LATENESS = Histogram {
        name: "tickler_dispatch_lateness_seconds",
        unit: Seconds,
        buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0],
        help: "Dispatch time minus schedule time, per job.",
    },
    DISPATCH_STAGE = Histogram {
        name: "tickler_dispatch_stage_seconds",
        unit: Seconds,
        labels: ["stage"],
        help: "Time spent per dispatch stage: claim (Redis, per pass), cas \
            (MySQL compare-and-set, per pass), hold (per job: from the claim \
            to its time, how far ahead it was claimed), ack (per group of \
            records: sent to all acknowledged), mark (per settle: recording \
            outcomes in MySQL and Redis).",
    },
    DISPATCH_CAS_LOST = Counter {
        name: "tickler_dispatch_cas_lost_total",
        help: "Ids Redis offered that MySQL refused (cancelled, moved, done, \
            or not yet due).",
    },
    PRODUCE_FAILED = Counter {
        name: "tickler_produce_failed_total",
        help: "Jobs the broker did not accept; they go back to pending.",
    },
    PRODUCE_REFUSED = Counter {
        name: "tickler_produce_refused_total",
        labels: ["topic", "reason"],
        help: "Sends refused for the job's own sake (missing topic, record too \
            large, not authorised...): a failed attempt each, by topic and \
            reason.",
    },
    PRODUCER_RESTARTS = Counter {
        name: "tickler_producer_restarts_total",
        help: "Kafka producers replaced because every send failed for several \
            batches, or librdkafka reported them fatally failed.",
    },
    DISPATCH_WITHHELD = Counter {
        name: "tickler_dispatch_withheld_total",
        labels: ["reason"],
        help: "Claimed jobs the dispatcher did not send, by reason: lease \
            (this instance's heartbeat or the claim's send deadline ran out) \
            or paused (the topic was paused since the claim). They go back to \
            pending.",
    },
    DISPATCH_PACED = Counter {
        name: "tickler_dispatch_paced_total",
        labels: ["topic"],
        help: "Due jobs of a paced topic (max_per_second) held back and spread \
            at its rate, by topic; a job held twice counts twice.",
    },
    RATE_FALLBACK = Counter {
        name: "tickler_rate_fallback_total",
        help: "API rate checks (a token's requests or jobs) made on this \
            instance alone because Redis, where every instance shares them, \
            did not answer: the check fails open to the per-instance rate.",
    },
    DISPATCH_SMOOTHED = Counter {
        name: "tickler_dispatch_smoothed_total",
        help: "Due jobs with a flexible window held back, inside it, to keep \
            the deployment under dispatcher.smooth_per_second; a job held \
            twice counts twice.",
    },
    WINDOW_MISSED = Counter {
        name: "tickler_window_missed_total",
        labels: ["topic"],
        help: "Jobs with a flexible window produced after its end (tickler \
            could not dispatch them in it: a paused topic, a pace, an \
            outage), by topic; each also says so in its last_error.",
    },
    DISPATCH_HELD = Counter {
        name: "tickler_dispatch_held_total",
        labels: ["reason"],
        help: "Due jobs the claim refused to produce: reason=paused (their \
            topic is; out of Redis until it resumes), expired (a skip \
            schedule's occurrence past its misfire grace; cancelled) or \
            in_flight (their topic's max_in_flight or their group's \
            group_max_in_flight is reached: asked again 250 ms later).",
    },
    JOBS_HELD = Counter {
        name: "tickler_jobs_held_total",
        labels: ["topic", "reason"],
        help: "Due jobs held back, pending, instead of sent: reason=payload_schema \
            (their payload no longer matched their topic's schema). Held until \
            released (POST /v1/jobs/{id}/release), by topic.",
    },
    DISPATCH_FENCED = Counter {
        name: "tickler_dispatch_fenced_total",
        help: "Claimed ids this instance's compare-and-set refused because it \
            no longer held their shard (paused past its TTL, or rebalanced).",
    },
    JOBS_UNREADABLE = Counter {
        name: "tickler_jobs_unreadable_total",
        help: "Claimed jobs whose row did not decode (a hand edit the column \
            accepted): set aside as dead, named by tickler doctor.",
    },

    // The Redis window and its repairs: the loader, the reconciler, claims in doubt.
    LOADER_INDEXED = Counter {
        name: "tickler_loader_indexed_total",
        help: "Jobs the loader put in the Redis window.",
    },
    INDEX_REBUILDS = Counter {
        name: "tickler_index_rebuilds_total",
        help: "Times the loader found the Redis window lost (flush, restart) \
            and rebuilt it.",
    },
    RECONCILER_REFED = Counter {
        name: "tickler_reconciler_refed_total",
        help: "Overdue pending jobs the reconciler found missing from Redis \
            and indexed again.",
    },
    RECONCILER_RESCUED = Counter {
        name: "tickler_reconciler_rescued_total",
        help: "Claims in doubt (lease expired, instance dead, send timed out) \
            whose record the read-back did not find on Kafka: returned to \
            pending, to be produced again.",
    },
    DOUBTS_SETTLED = Counter {
        name: "tickler_doubts_settled_total",
        labels: ["outcome"],
        help: "Claims in doubt settled by reading their topic back, by what \
            was found: outcome=produced (marked dispatched at the record's \
            position) or outcome=absent (pending again).",
    },
    DOUBTS_UNSETTLED = Counter {
        name: "tickler_doubts_unsettled_total",
        help: "Claims in doubt a reconciler pass could not settle because \
            Kafka could not be read in time; they stay dispatching (a cancel \
            answers in_flight) until a later pass.",
    },

    // Proof of delivery: records read back at their position (#59).
    DELIVERY_VERIFIED = Counter {
        name: "tickler_delivery_verified_total",
        help: "Dispatched jobs whose record was read back at the position the \
            broker acknowledged it at and found there (verified_at set).",
    },
    DELIVERY_MISSING = Counter {
        name: "tickler_delivery_missing_total",
        labels: ["topic"],
        help: "Dispatched jobs whose record the broker acknowledged but is not \
            at its position (lost by the broker, the topic deleted or made \
            again): produced again as the next attempt. Any is an alert.",
    },
    TOPIC_OVERDUE_CAPPED = Gauge {
        name: "tickler_topic_overdue_capped",
        labels: ["topic"],
        help: "1 while the topic has more jobs overdue (due longer ago than \
            its overdue_after_ms) than its max_overdue; its overdue_policy \
            acts (expire: the oldest end expired). Topics with a cap only; \
            instances running the reconciler role.",
    },
    TOPIC_OVERDUE_EXPIRED = Counter {
        name: "tickler_topic_overdue_expired_total",
        labels: ["topic"],
        help: "Overdue jobs ended expired, never produced, because their \
            topic had more than its max_overdue overdue (overdue_policy = \
            expire).",
    },
    TOPIC_OVERDUE_DEFERRED = Counter {
        name: "tickler_topic_overdue_deferred_total",
        labels: ["topic"],
        help: "Overdue jobs moved later, in their order, because their topic \
            had more than its max_overdue overdue (overdue_policy = defer): \
            the backlog goes out at most max_overdue per overdue_after_ms.",
    },
    TZDATA_RELEASE = Gauge {
        name: "tickler_tzdata_release",
        labels: ["version", "source"],
        help: "1 for the tzdata release this instance resolves local times \
            with (its directory, or built-in); instances that disagree \
            resolve a wall-clock time differently until they agree.",
    },
    TZDATA_JOBS = Counter {
        name: "tickler_tzdata_jobs_total",
        labels: ["outcome"],
        help: "Pending wall-clock jobs of an older tzdata release computed \
            again under a newer one: moved (their instant changed), kept \
            (unchanged), unknown_zone (the newer release lacks their \
            zone: left as they are), or moved_past_expiry (also counted \
            as moved: past their own expires_at, which never moves later; \
            they end expired when they fall due).",
    },
    DELIVERY_UNKNOWABLE = Counter {
        name: "tickler_delivery_unknowable_total",
        labels: ["topic"],
        help: "Dispatched jobs whose record can never be read back (retention \
            removed its offset first, or its row names no position): \
            neither verified nor produced again.",
    },
    DELIVERY_UNVERIFIED = Counter {
        name: "tickler_delivery_unverified_total",
        labels: ["reason"],
        help: "Records the verifier let go of unread, by reason: queue_full \
            (the dispatcher outran it; the sweep reads them later) or \
            gave_up (still unreadable an hour after it was produced, the \
            sweep's lookback: it stays unverified).",
    },
    DELIVERY_VERIFY_LAG = Gauge {
        name: "tickler_delivery_verify_lag_seconds",
        unit: Seconds,
        help: "How long ago the oldest record waiting to be read back was \
            produced (0: none waits).",
    },
    DELIVERY_VERIFY_QUEUE = Gauge {
        name: "tickler_delivery_verify_queue",
        help: "Records waiting to be read back on this instance.",
    },

    // Consumption: the consumer groups reading tickler's topics (#59).
    CONSUMER_BEHIND_RECORDS = Gauge {
        name: "tickler_consumer_behind_records",
        labels: ["topic", "group"],
        help: "Records of the topic the consumer group has not read: each \
            partition's end less the group's committed offset, summed.",
    },
    CONSUMER_BEHIND_SECONDS = Gauge {
        name: "tickler_consumer_behind_seconds",
        unit: Seconds,
        labels: ["topic", "group"],
        help: "Age of the oldest record of the topic the consumer group has \
            not read (0: it has read everything), precise to \
            consumption.interval_ms.",
    },
    CONSUMER_STALLED = Gauge {
        name: "tickler_consumer_stalled",
        labels: ["topic", "group"],
        help: "1 while the consumer group has left a record of the topic \
            unread longer than consumption.alert_after_ms (or the topic's \
            consumed_within_ms), else 0.",
    },

    // What became of dispatched jobs: results, retries, the dead, the purge; schedules.
    RESULTS_APPLIED = Counter {
        name: "tickler_results_applied_total",
        labels: ["channel", "outcome"],
        help: "Result reports applied, by channel (topic, http) and outcome.",
    },
    RESULTS_IGNORED = Counter {
        name: "tickler_results_ignored_total",
        labels: ["channel", "reason"],
        help: "Result reports that changed nothing, by channel and reason \
            (stale_attempt, finished, not_expected, not_dispatched, \
            unknown_job).",
    },
    RESULTS_MALFORMED = Counter {
        name: "tickler_results_malformed_total",
        help: "Records on the results topic that are not a valid report; \
            skipped.",
    },
    RESULTS_FAILED = Counter {
        name: "tickler_results_failed_total",
        help: "Reports from the results topic the database refused three times \
            (not for being down); logged and skipped.",
    },
    ACK_TIMEOUTS = Counter {
        name: "tickler_ack_timeouts_total",
        help: "Dispatched jobs whose ack deadline passed without a result.",
    },
    JOBS_RETRIED = Counter {
        name: "tickler_jobs_retried_total",
        help: "Jobs sent back to pending for another attempt.",
    },
    JOBS_DEAD = Counter {
        name: "tickler_jobs_dead_total",
        help: "Jobs that ended dead.",
    },
    DEAD_LETTERS_PRODUCED = Counter {
        name: "tickler_dead_letters_produced_total",
        help: "Dead-letter records produced.",
    },
    JOBS_PURGED = Counter {
        name: "tickler_jobs_purged_total",
        help: "Finished jobs deleted after jobs.retention_days, with their history.",
    },
    SCHEDULE_OCCURRENCES = Counter {
        name: "tickler_schedule_occurrences_total",
        help: "Occurrences of recurring schedules created as jobs (by the \
            materializer, a trigger or a backfill).",
    },
    SCHEDULE_MISFIRES_SKIPPED = Counter {
        name: "tickler_schedule_misfires_skipped_total",
        help: "Occurrences missed while no tickler ran that their schedule's \
            misfire policy did not create.",
    },

    // Failures a background role survives (tried again on its next pass).
    INDEX_ERRORS = Counter {
        name: "tickler_index_errors_total",
        help: "Redis operations that failed (repaired later from MySQL).",
    },
    STORE_ERRORS = Counter {
        name: "tickler_store_errors_total",
        labels: ["what"],
        help: "MySQL operations of a background role that failed, by what was \
            being done (tried again on its next pass).",
    },
    PASS_FAILURES = Counter {
        name: "tickler_pass_failures_total",
        labels: ["what"],
        help: "Passes of a background role that failed for another reason than \
            MySQL or Redis (a Kafka producer that cannot be made, say), by \
            pass (tried again on the next).",
    },
    NOTIFY_FAILED = Counter {
        name: "tickler_notify_failed_total",
        help: "Notifications the webhook (notify.webhook_url) did not take; \
            each is sent again next round.",
    },

    // Instances and shards.
    INSTANCES_LIVE = Gauge {
        name: "tickler_instances_live",
        help: "Instances whose heartbeat is within instance_ttl_ms, as this \
            instance last saw them.",
    },
    SHARDS = Gauge {
        name: "tickler_shards",
        help: "The deployment's shard count (rows of shard_leases).",
    },
    SHARDS_OWNED = Gauge {
        name: "tickler_shards_owned",
        help: "Shards this instance's dispatcher holds.",
    },
    SHARD_TAKEOVERS = Counter {
        name: "tickler_shard_takeovers_total",
        help: "Shards this instance took: free ones, or a dead instance's.",
    },
    MEMBERSHIP_FAILURES = Counter {
        name: "tickler_membership_failures_total",
        help: "Membership rounds (heartbeat, balance, rescue) that failed, \
            mostly for MySQL.",
    },
    INSTANCE_LAPSES = Counter {
        name: "tickler_instance_lapses_total",
        help: "Heartbeats of this instance that found its last one older than \
            instance_ttl_ms (or its row gone): the others may have taken it \
            for dead, so it sends nothing it claimed before (a paused process, \
            a stalled runtime, a partition).",
    },
    DEAD_INSTANCE_RESCUED = Counter {
        name: "tickler_dead_instance_rescued_total",
        help: "Jobs a dead instance held in dispatching, put in doubt without \
            waiting for the claim lease: read back after \
            kafka.message_timeout_ms, then produced again if not found.",
    },

    // Gauges from the truth (src/roles/reporter/truth.rs): one instance, the reporter, publishes
    // them; every other publishes 0.
    TRUTH_REPORTER = Gauge {
        name: "tickler_truth_reporter",
        help: "1 on the instance reporting the gauges from the truth, 0 on the \
            others.",
    },
    TRUTH_JOBS = Gauge {
        name: "tickler_jobs",
        labels: ["status", "topic"],
        help: "Jobs by status (pending, dispatching, dispatched, dead) and \
            topic, from MySQL; topics past gauges.topics_max are summed under \
            topic=\"_other\". Reported by one instance \
            (tickler_truth_reporter = 1), 0 elsewhere.",
    },
    TRUTH_OVERDUE = Gauge {
        name: "tickler_jobs_overdue",
        help: "Pending jobs whose run time has passed (due, not yet \
            dispatched), from MySQL.",
    },
    TRUTH_OVERDUE_OLDEST = Gauge {
        name: "tickler_jobs_overdue_oldest_seconds",
        unit: Seconds,
        help: "Age of the oldest overdue pending job (0 when none).",
    },
    TRUTH_WINDOW_JOBS = Gauge {
        name: "tickler_window_jobs",
        help: "Jobs the Redis index should hold by MySQL: pending within \
            window_ms, and dispatching.",
    },
    TRUTH_INDEX_JOBS = Gauge {
        name: "tickler_index_jobs",
        help: "Entries in the Redis index (due and in flight).",
    },
    TRUTH_INDEX_DRIFT = Gauge {
        name: "tickler_index_drift",
        help: "tickler_window_jobs - tickler_index_jobs: positive when Redis \
            lacks jobs MySQL says it should hold; a few in transit is normal.",
    },
    TRUTH_RESULTS_LAG = Gauge {
        name: "tickler_results_lag",
        help: "Records on the results topic tickler's consumer group has not \
            consumed (-1: could not be read).",
    },
    TRUTH_INGRESS_LAG = Gauge {
        name: "tickler_ingress_lag",
        labels: ["topic"],
        help: "Records of a request topic the ingress's consumer group has not \
            yet committed, by request topic (-1: not read).",
    },
    TRUTH_NEXT_DUE = Gauge {
        name: "tickler_next_due_seconds",
        unit: Seconds,
        help: "Until the next pending job is due (negative: overdue; +Inf: \
            none pending).",
    },
    TRUTH_DISPATCHERS_LIVE = Gauge {
        name: "tickler_dispatchers_live",
        help: "Live instances running the dispatcher role, from the instances \
            table.",
    },
    TRUTH_SCHEDULES = Gauge {
        name: "tickler_schedules",
        labels: ["status"],
        help: "Recurring schedules by status (active, paused, ended). Reporter \
            instance only.",
    },
    TRUTH_SCHEDULES_BEHIND = Gauge {
        name: "tickler_schedules_behind",
        help: "Active schedules whose next occurrence is over a minute past \
            its time and still not a job: no instance runs the loader role \
            (the materializer), or it fails. Reporter instance only.",
    },
    TRUTH_TOPICS_PAUSED = Gauge {
        name: "tickler_topics_paused",
        help: "Topics paused (their due jobs are held). Reporter instance \
            only.",
    },
    TRUTH_COMPUTED = Gauge {
        name: "tickler_truth_computed_timestamp_seconds",
        unit: Seconds,
        help: "Unix time of the reporter's last successful computation: time() \
            minus this is how stale the gauges are (they keep their values \
            while MySQL does not answer).",
    },
    TRUTH_BURST_JOBS = Gauge {
        name: "tickler_burst_ahead_jobs",
        labels: ["topic"],
        help: "Pending jobs due in the topic's busiest minute of the next \
            gauges.burst_horizon_ms; reporter instance only.",
    },
    TRUTH_BURST_DRAIN = Gauge {
        name: "tickler_burst_ahead_drain_seconds",
        unit: Seconds,
        labels: ["topic"],
        help: "How long the topic's busiest minute ahead takes to produce at \
            its pace (or gauges.burst_drain_per_second); over 60, its last \
            jobs go out late.",
    },
    TRUTH_BURST_IN = Gauge {
        name: "tickler_burst_ahead_in_seconds",
        unit: Seconds,
        labels: ["topic"],
        help: "Until the topic's busiest minute ahead starts.",
    },
    WATERMARK_LAG = Gauge {
        name: "tickler_watermark_lag_seconds",
        unit: Seconds,
        labels: ["topic"],
        help: "How far the topic's due-time watermark is behind the \
            database's clock: every job due before now less this is done \
            with; instances running the reconciler role.",
    },
    TRUTH_SCAN = Gauge {
        name: "tickler_truth_scan_seconds",
        unit: Seconds,
        help: "How long the last computation of these gauges took.",
    },
    COMPRESSION_HELD = Gauge {
        name: "tickler_compression_held",
        help: "1 while compression.payloads = zstd is held: a live instance \
            is built before compression and cannot read compressed payloads, \
            so new ones are written as given; 0 otherwise.",
    },
    SEALING_HELD = Gauge {
        name: "tickler_sealing_held",
        help: "0 while new rows are sealed under encryption.active_key; 1 \
            while it is held back because a live instance lacks it (sealed \
            under a key they all hold); 2 while sealing is held (written \
            plain) because a live instance is built before encryption at rest.",
    },
    TRUTH_COUNT_AGE = Gauge {
        name: "tickler_jobs_count_age_seconds",
        unit: Seconds,
        help: "How old tickler_jobs is: since the oldest status's last \
            complete count began (counted a bounded step each computation, \
            gauges.counts_budget_ms); -1 until every status is counted once.",
    },

    // The process's own, under the names Prometheus's client libraries use.
    PROCESS_RSS = Gauge {
        name: "process_resident_memory_bytes",
        help: "Resident memory of this process, in bytes (Linux).",
    },
    PROCESS_FDS = Gauge {
        name: "process_open_fds",
        help: "Open file descriptors of this process (Linux).",
    },
}

/// Installs the process-wide recorder once and returns the handle that
/// renders it. Later calls (several servers in one test process) share it.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = recorder();
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

/// A recorder with the declared histograms' buckets.
fn recorder() -> PrometheusRecorder {
    METRICS
        .iter()
        .filter(|m| !m.buckets.is_empty())
        .try_fold(PrometheusBuilder::new(), |builder, m| {
            builder.set_buckets_for_metric(Matcher::Full(m.name.to_owned()), m.buckets)
        })
        // Fails only for empty buckets, which the filter leaves out.
        .unwrap_or_else(|_| PrometheusBuilder::new())
        .build_recorder()
}

/// Gives the recorder every declared metric's help text and unit.
fn describe() {
    metrics::with_recorder(|recorder| {
        for m in METRICS {
            let (name, help) = (
                KeyName::from_const_str(m.name),
                SharedString::const_str(m.help),
            );
            match m.kind {
                Kind::Counter => recorder.describe_counter(name, m.unit, help),
                Kind::Gauge => recorder.describe_gauge(name, m.unit, help),
                Kind::Histogram => recorder.describe_histogram(name, m.unit, help),
            }
        }
    });
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
        PROCESS_RSS.get().set(kib * 1024.0);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        PROCESS_FDS.get().set(fds.count() as f64);
    }
}

// The events. Each counts its metric (and writes its log line, if the
// event has one): a caller makes one call. Same order as the table.

// Jobs coming in.

/// Jobs created, from any edge (counted by the jobs service).
pub fn jobs_created(n: usize) {
    if n > 0 {
        JOBS_CREATED.get().increment(n as u64);
        tracing::debug!(num_jobs = n, "jobs created");
    }
}

pub fn api_connection_opened() {
    API_CONNECTIONS.get().increment(1.0);
}

pub fn api_connection_closed() {
    API_CONNECTIONS.get().decrement(1.0);
}

/// A request refused for who sent it or how often (`code`: the error's).
pub fn api_refused(code: &'static str) {
    API_REFUSED.with([code.into()]).increment(1);
}

/// A job accepted for a topic the broker does not have (`kafka.topic_check =
/// warn`): counted and logged.
pub fn job_unknown_topic(topic: &str) {
    JOBS_UNKNOWN_TOPIC
        .with([topic_label(topic).into()])
        .increment(1);
    tracing::warn!(topic, "job accepted for a topic the broker does not have");
}

/// A request taken by the ingress, by request topic and outcome.
pub fn ingress_requests(topic: &str, outcome: &'static str, n: usize) {
    INGRESS_REQUESTS
        .with([topic.to_owned().into(), outcome.into()])
        .increment(n as u64);
}

/// The request partitions this instance reads.
pub fn ingress_partitions(n: usize) {
    INGRESS_PARTITIONS.get().set(n as f64);
}

/// A request the ingress refused, by request topic and code.
/// An ingress request refused (answered with `code`), at its position.
pub fn ingress_refused(
    topic: &str,
    partition: i32,
    offset: i64,
    code: &'static str,
    error: &dyn std::fmt::Display,
) {
    INGRESS_REFUSED
        .with([topic.to_owned().into(), code.into()])
        .increment(1);
    tracing::info!(topic, partition, offset, code, error = %error, "ingress request refused");
}

pub fn ingress_replies_failed(n: usize) {
    INGRESS_REPLIES_FAILED.get().increment(n as u64);
}

// The dispatcher.

pub fn dispatched(n: usize) {
    JOBS_DISPATCHED.get().increment(n as u64);
}

pub fn dispatch_lateness(scheduled: DateTime<Utc>, dispatched: DateTime<Utc>) {
    let seconds = (dispatched - scheduled).num_milliseconds().max(0) as f64 / 1000.0;
    DISPATCH_LATENESS.get().record(seconds);
}

pub fn dispatch_stage(stage: &'static str, spent: std::time::Duration) {
    DISPATCH_STAGE
        .with([stage.into()])
        .record(spent.as_secs_f64());
}

pub fn dispatch_cas_lost(n: usize) {
    if n > 0 {
        DISPATCH_CAS_LOST.get().increment(n as u64);
    }
}

pub fn produce_failed(n: usize) {
    PRODUCE_FAILED.get().increment(n as u64);
}

/// A send refused because of the job (not the broker's health).
/// A job's record refused by the broker for the job's own sake.
pub fn produce_refused(job_id: u64, topic: &str, reason: &'static str, error: &str) {
    PRODUCE_REFUSED
        .with([topic_label(topic).into(), reason.into()])
        .increment(1);
    tracing::warn!(job_id, topic, reason, error, "record refused");
}

/// The Kafka producer replaced, after `failed_passes` failed passes or a
/// fatal error.
pub fn producer_restarted(failed_passes: u32, fatal: &dyn std::fmt::Debug) {
    PRODUCER_RESTARTS.get().increment(1);
    tracing::warn!(failed_passes, fatal = ?fatal, "replacing the kafka producer");
}

pub fn dispatch_withheld(reason: &'static str, n: usize) {
    if n > 0 {
        DISPATCH_WITHHELD.with([reason.into()]).increment(n as u64);
    }
}

/// Jobs of a paced topic held back for later, by topic.
pub fn dispatch_paced(topic: &str, n: usize) {
    DISPATCH_PACED
        .with([topic_label(topic).into()])
        .increment(n as u64);
}

/// A rate counted on this instance rather than in Redis: logged when Redis
/// has just failed (`why`), not while the instance rests from asking it.
pub fn rate_fallback(why: Option<&dyn std::fmt::Display>) {
    RATE_FALLBACK.get().increment(1);
    if let Some(why) = why {
        tracing::warn!("the shared API rates {why}; counting on this instance for a second");
    }
}

pub fn dispatch_smoothed(n: usize) {
    DISPATCH_SMOOTHED.get().increment(n as u64);
}

/// A job with a window produced after its end.
pub fn window_missed(topic: &str) {
    WINDOW_MISSED.with([topic_label(topic).into()]).increment(1);
}

/// Due jobs the compare-and-set refused to produce: `paused` (their topic
/// is) or `expired` (past a skip schedule's misfire grace; cancelled).
/// A due job held back instead of sent (its payload fails its topic's
/// schema), with where it failed.
pub fn job_held(job_id: u64, topic: &str, reason: &'static str, why: &str) {
    JOBS_HELD
        .with([topic_label(topic).into(), reason.into()])
        .increment(1);
    tracing::warn!(job_id, topic, reason, failure = why, "job held, not sent");
}

pub fn dispatch_held(reason: &'static str, n: usize) {
    DISPATCH_HELD.with([reason.into()]).increment(n as u64);
}

/// Claimed ids the compare-and-set refused because this instance no
/// longer holds their shard: counted and logged.
pub fn dispatch_fenced(n: usize) {
    if n > 0 {
        DISPATCH_FENCED.get().increment(n as u64);
        tracing::warn!(num_jobs = n, "claim fenced off: a shard has a new owner");
    }
}

/// Claimed rows that do not decode, set aside as dead: `(id, why)`.
pub fn jobs_unreadable(rows: &[(u64, String)]) {
    for (id, why) in rows {
        tracing::error!(job_id = id, error = %why, "claimed row does not decode; set aside as dead");
    }
    if !rows.is_empty() {
        JOBS_UNREADABLE.get().increment(rows.len() as u64);
    }
}

// The window and its repairs.

pub fn loader_indexed(n: usize) {
    LOADER_INDEXED.get().increment(n as u64);
}

/// The loader found the Redis window lost (a flush, a restart) and
/// re-indexes it: counted and logged.
pub fn index_rebuilt() {
    INDEX_REBUILDS.get().increment(1);
    tracing::warn!("redis index lost: re-indexing the window from mysql");
}

pub fn reconciler_refed(n: u64) {
    if n > 0 {
        RECONCILER_REFED.get().increment(n);
    }
}

/// Claims in doubt settled by reading their topic back: `produced`
/// found there (marked), `absent` not (produced again).
pub fn doubts_settled(produced: usize, absent: usize) {
    if produced > 0 {
        DOUBTS_SETTLED
            .with(["produced".into()])
            .increment(produced as u64);
    }
    if absent > 0 {
        RECONCILER_RESCUED.get().increment(absent as u64);
        DOUBTS_SETTLED
            .with(["absent".into()])
            .increment(absent as u64);
        tracing::info!(
            num_jobs = absent,
            "claims in doubt not found on kafka: produced again"
        );
    }
}

pub fn doubts_unsettled(n: usize) {
    DOUBTS_UNSETTLED.get().increment(n as u64);
}

// Proof of delivery.

pub fn delivery_verified(n: usize) {
    if n > 0 {
        DELIVERY_VERIFIED.get().increment(n as u64);
    }
}

/// Whether `topic` is over its `max_overdue` now.
pub fn topic_overdue_capped(topic: &str, over: bool) {
    TOPIC_OVERDUE_CAPPED
        .with([topic.to_owned().into()])
        .set(if over { 1.0 } else { 0.0 });
}

/// `n` overdue jobs of `topic` deferred past its `max_overdue` of `cap`.
pub fn topic_overdue_deferred(topic: &str, cap: u32, n: usize) {
    if n == 0 {
        return;
    }
    TOPIC_OVERDUE_DEFERRED
        .with([topic.to_owned().into()])
        .increment(n as u64);
    tracing::info!(
        topic,
        max_overdue = cap,
        num_jobs = n,
        "jobs deferred: their topic had more overdue than its max_overdue (overdue_policy = defer)"
    );
}

/// `n` overdue jobs of `topic` expired past its `max_overdue` of `cap`.
pub fn topic_overdue_expired(topic: &str, cap: u32, n: usize) {
    if n == 0 {
        return;
    }
    TOPIC_OVERDUE_EXPIRED
        .with([topic.to_owned().into()])
        .increment(n as u64);
    tracing::warn!(
        topic,
        max_overdue = cap,
        num_jobs = n,
        "jobs expired: their topic had more overdue than its max_overdue (overdue_policy = expire)"
    );
}

/// This instance resolves local times with tzdata `version` from
/// `source` from now on (`previous`: what it did before, if anything).
pub fn tzdata_loaded(version: &str, source: &str, previous: Option<(&str, &str)>) {
    if let Some((old_version, old_source)) = previous {
        TZDATA_RELEASE
            .with([old_version.to_owned().into(), old_source.to_owned().into()])
            .set(0.0);
    }
    TZDATA_RELEASE
        .with([version.to_owned().into(), source.to_owned().into()])
        .set(1.0);
    tracing::info!(
        tzdata = version,
        source,
        previous = previous.map(|(version, _)| version),
        "tzdata loaded: local times resolve with it"
    );
}

/// Wall-clock jobs computed again under a newer tzdata whose instant did
/// not change: stamped with it.
pub fn tzdata_kept(n: u64) {
    TZDATA_JOBS.with(["kept".into()]).increment(n);
}

/// A wall-clock job computed again under a newer tzdata.
pub fn tzdata_job(outcome: &'static str, job_id: u64, zone: &str, moved_ms: i64) {
    TZDATA_JOBS.with([outcome.into()]).increment(1);
    match outcome {
        "moved" => tracing::info!(
            job_id,
            zone,
            moved_ms,
            "a newer tzdata moved a wall-clock job"
        ),
        "unknown_zone" => tracing::warn!(
            job_id,
            zone,
            "a wall-clock job's zone is not in the newer tzdata: left at its instant"
        ),
        "moved_past_expiry" => tracing::warn!(
            job_id,
            zone,
            moved_ms,
            "a newer tzdata moved a wall-clock job past its own expires_at: it ends expired when it falls due, unsent"
        ),
        _ => {}
    }
}

/// A record the broker acknowledged is not at its position: logged with
/// where it should be and what is there, counted, produced again.
pub fn delivery_missing(job_id: u64, topic: &str, partition: i32, offset: i64, why: &str) {
    DELIVERY_MISSING
        .with([topic.to_owned().into()])
        .increment(1);
    tracing::error!(
        job_id,
        topic,
        partition,
        offset,
        found = why,
        "an acknowledged record is not on its topic: produced again as the next attempt"
    );
}

pub fn delivery_unknowable(job_id: u64, topic: &str, why: &str) {
    DELIVERY_UNKNOWABLE
        .with([topic.to_owned().into()])
        .increment(1);
    tracing::warn!(
        job_id,
        topic,
        why,
        "a dispatched job's record cannot be read back; it stays unverified"
    );
}

/// Records let go of unread: `queue_full` or `gave_up`.
pub fn delivery_unverified(reason: &'static str, n: usize) {
    if n > 0 {
        DELIVERY_UNVERIFIED
            .with([reason.into()])
            .increment(n as u64);
    }
}

/// The verifier's queue: how many wait, and how old the oldest is.
pub fn delivery_verify_queue(waiting: usize, oldest: std::time::Duration) {
    DELIVERY_VERIFY_QUEUE.get().set(waiting as f64);
    DELIVERY_VERIFY_LAG.get().set(oldest.as_secs_f64());
}

/// How far behind a consumer group is on a topic.
pub fn consumer_behind(topic: &str, group: &str, records: i64, seconds: f64, stalled: bool) {
    let labels = || [topic.to_owned().into(), group.to_owned().into()];
    CONSUMER_BEHIND_RECORDS.with(labels()).set(records as f64);
    CONSUMER_BEHIND_SECONDS.with(labels()).set(seconds);
    CONSUMER_STALLED
        .with(labels())
        .set(if stalled { 1.0 } else { 0.0 });
}

/// A consumer group stopped reading a topic: logged once, with the oldest
/// job it has not read.
pub fn consumer_stalled(
    topic: &str,
    group: &str,
    records: i64,
    seconds: f64,
    oldest_job: Option<u64>,
) {
    tracing::warn!(
        topic,
        group,
        behind_records = records,
        behind_seconds = seconds,
        oldest_job,
        "a consumer group has not read a record for too long"
    );
}

// What became of dispatched jobs.

pub fn result_applied(channel: &'static str, outcome: &'static str) {
    RESULTS_APPLIED
        .with([channel.into(), outcome.into()])
        .increment(1);
}

pub fn result_ignored(channel: &'static str, reason: &'static str) {
    RESULTS_IGNORED
        .with([channel.into(), reason.into()])
        .increment(1);
}

/// A record of the results topic that is not a report, skipped.
pub fn result_malformed(partition: i32, offset: i64, error: &dyn std::fmt::Display) {
    RESULTS_MALFORMED.get().increment(1);
    tracing::warn!(partition, offset, error = %error, "skipping a malformed record on the results topic");
}

/// A report the database keeps refusing, skipped (`report`: how the log
/// names it).
pub fn result_failed(job_id: u64, attempt: u32, outcome: &str, error: &dyn std::fmt::Display) {
    RESULTS_FAILED.get().increment(1);
    tracing::error!(job_id, attempt, outcome, error = %error, "cannot apply a result report; skipping it");
}

pub fn ack_timeouts(n: usize) {
    if n > 0 {
        ACK_TIMEOUTS.get().increment(n as u64);
    }
}

pub fn jobs_retried(n: usize) {
    if n > 0 {
        JOBS_RETRIED.get().increment(n as u64);
    }
}

pub fn jobs_dead(n: usize) {
    if n > 0 {
        JOBS_DEAD.get().increment(n as u64);
    }
}

pub fn dead_letters_produced(n: usize) {
    if n > 0 {
        DEAD_LETTERS_PRODUCED.get().increment(n as u64);
    }
}

pub fn jobs_purged(n: u64) {
    if n > 0 {
        JOBS_PURGED.get().increment(n);
    }
}

/// Occurrences of schedules created as jobs.
pub fn schedule_occurrences(n: usize) {
    SCHEDULE_OCCURRENCES.get().increment(n as u64);
}

/// Missed occurrences not created, as their schedule's policy said.
pub fn schedule_misfires_skipped(n: u64) {
    SCHEDULE_MISFIRES_SKIPPED.get().increment(n);
}

// Failures a background role survives.

/// A Redis operation failed: counted and logged here, alike at every site.
/// Harmless for correctness — MySQL has the truth, and the loader, the
/// reconciler and the claim leases repair the index — but it costs latency.
pub fn index_failed(what: &'static str, num_jobs: usize, error: &dyn std::fmt::Display) {
    INDEX_ERRORS.get().increment(1);
    tracing::warn!(what, num_jobs, error = %error, "redis operation failed");
}

/// A background role's MySQL operation failed: counted by `what` (a fixed
/// word naming the step) and logged; the role tries again on its next pass.
pub fn store_failed(what: &'static str, error: &dyn std::fmt::Display) {
    STORE_ERRORS.with([what.into()]).increment(1);
    tracing::warn!(what, error = %error, "mysql operation failed");
}

/// A background role's pass failed for another reason than MySQL or
/// Redis: counted by `what` (the pass's fixed name) and logged; the role
/// tries again on its next pass.
pub fn pass_failed(what: &'static str, error: &dyn std::fmt::Display) {
    PASS_FAILURES.with([what.into()]).increment(1);
    tracing::warn!(what, error = %error, "pass failed");
}

/// A notification the webhook did not take (`why`); sent again next round.
pub fn notify_failed(event: &dyn std::fmt::Display, why: &dyn std::fmt::Display) {
    NOTIFY_FAILED.get().increment(1);
    tracing::warn!(%event, "the notify webhook {why}; the notification is sent again next round");
}

// Instances and shards.

pub fn compression_held(held: bool) {
    COMPRESSION_HELD.get().set(if held { 1.0 } else { 0.0 });
}

pub fn sealing_held(state: u8) {
    SEALING_HELD.get().set(f64::from(state));
}

pub fn instances_live(n: usize) {
    INSTANCES_LIVE.get().set(n as f64);
}

pub fn shards(n: u32) {
    SHARDS.get().set(f64::from(n));
}

pub fn shards_owned(n: usize) {
    SHARDS_OWNED.get().set(n as f64);
}

/// Shards this instance took over.
pub fn shards_acquired(shards: &[u32]) {
    if !shards.is_empty() {
        SHARD_TAKEOVERS.get().increment(shards.len() as u64);
        tracing::info!(shards = ?shards, "shards taken over");
    }
}

pub fn membership_failed() {
    MEMBERSHIP_FAILURES.get().increment(1);
}

pub fn instance_lapsed() {
    INSTANCE_LAPSES.get().increment(1);
}

pub fn dead_instance_rescued(n: usize) {
    if n > 0 {
        DEAD_INSTANCE_RESCUED.get().increment(n as u64);
    }
}

// The gauges from the truth.

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
    /// None: not every status counted through yet; published as -1.
    pub counts_age_s: Option<f64>,
}

pub fn truth_jobs(status: &str, topic: &str, count: u64) {
    TRUTH_JOBS
        .with([status.to_owned().into(), topic.to_owned().into()])
        .set(count as f64);
}

pub fn truth_publish(g: &TruthGauges) {
    TRUTH_REPORTER.get().set(if g.reporter { 1.0 } else { 0.0 });
    TRUTH_OVERDUE.get().set(g.overdue as f64);
    TRUTH_OVERDUE_OLDEST.get().set(g.overdue_oldest_s);
    TRUTH_WINDOW_JOBS.get().set(g.window_jobs as f64);
    match (g.reporter, g.index_jobs) {
        (true, Some(redis)) => {
            TRUTH_INDEX_JOBS.get().set(redis as f64);
            TRUTH_INDEX_DRIFT
                .get()
                .set(g.window_jobs as f64 - redis as f64);
        }
        (true, None) => {}
        (false, _) => {
            TRUTH_INDEX_JOBS.get().set(0.0);
            TRUTH_INDEX_DRIFT.get().set(0.0);
        }
    }
    let or = |v: Option<f64>, none: f64| if g.reporter { v.unwrap_or(none) } else { 0.0 };
    TRUTH_RESULTS_LAG
        .get()
        .set(or(g.results_lag.map(|l| l as f64), -1.0));
    // Nothing pending: the next due job is infinitely far (`+Inf`).
    TRUTH_NEXT_DUE.get().set(or(g.next_due_s, f64::INFINITY));
    if g.reporter {
        TRUTH_COMPUTED
            .get()
            .set(chrono::Utc::now().timestamp_millis() as f64 / 1000.0);
    }
    TRUTH_DISPATCHERS_LIVE.get().set(g.dispatchers_live as f64);
    for (status, n) in [
        ("active", g.schedules.active),
        ("paused", g.schedules.paused),
        ("ended", g.schedules.ended),
    ] {
        TRUTH_SCHEDULES.with([status.into()]).set(n as f64);
    }
    TRUTH_SCHEDULES_BEHIND.get().set(g.schedules.behind as f64);
    TRUTH_TOPICS_PAUSED
        .get()
        .set(g.schedules.topics_paused as f64);
    TRUTH_SCAN.get().set(g.scan_s);
    TRUTH_COUNT_AGE.get().set(or(g.counts_age_s, -1.0));
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
        TRUTH_INGRESS_LAG.with([topic.clone().into()]).set(value);
    }
}

/// The bursts ahead, by topic: (topic, jobs, drain seconds, seconds until
/// it starts). A topic published before and absent now is set to 0.
pub fn truth_bursts(bursts: &[(String, u64, f64, f64)], gone: &[String]) {
    for topic in gone {
        let label = [topic.clone().into()];
        TRUTH_BURST_JOBS.with(label.clone()).set(0.0);
        TRUTH_BURST_DRAIN.with(label.clone()).set(0.0);
        TRUTH_BURST_IN.with(label).set(0.0);
    }
    for (topic, jobs, drain, starts_in) in bursts {
        let label = [topic.clone().into()];
        TRUTH_BURST_JOBS.with(label.clone()).set(*jobs as f64);
        TRUTH_BURST_DRAIN.with(label.clone()).set(*drain);
        TRUTH_BURST_IN.with(label).set(*starts_in);
    }
}

/// Each topic's watermark lag, in seconds.
pub fn watermarks(lags: &[(String, f64)]) {
    for (topic, lag) in lags {
        WATERMARK_LAG.with([topic.clone().into()]).set(*lag);
    }
}

/// Distinct topics a counter labelled by topic names at most, in a process:
/// with `kafka.topic_check = warn` or `off` a caller may name any topic, and each
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn every_metric_is_declared_once_with_a_valid_name_and_labels() {
        let mut names = std::collections::BTreeSet::new();
        for m in METRICS {
            assert!(names.insert(m.name), "{} is declared twice", m.name);
            let valid = |s: &str| {
                s.starts_with(|c: char| c.is_ascii_lowercase())
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            };
            assert!(valid(m.name), "{}", m.name);
            for (i, label) in m.labels.iter().enumerate() {
                assert!(valid(label), "{}: label {label}", m.name);
                assert!(
                    !m.labels[..i].contains(label),
                    "{}: label {label} twice",
                    m.name
                );
            }
            assert!(!m.help.is_empty(), "{} has no help", m.name);
            assert!(
                m.buckets.is_empty() || m.kind == Kind::Histogram,
                "{}: buckets on a {:?}",
                m.name,
                m.kind
            );
            assert!(m.buckets.windows(2).all(|w| w[0] < w[1]), "{}", m.name);
        }
        assert!(names.len() > 60, "{}", names.len());
    }

    /// The rows of docs/metrics.md's tables: `name{labels}` to its type.
    fn documented() -> BTreeMap<String, String> {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
            .expect("read docs/metrics.md");
        let mut rows = BTreeMap::new();
        let mut in_table = false;
        for line in text.lines() {
            if line == "| metric | type | meaning |" {
                in_table = true;
                continue;
            }
            if !line.starts_with('|') {
                in_table = false;
            }
            let cells: Vec<&str> = line.split(" | ").collect();
            if in_table && cells.len() >= 3 && !line.starts_with("|---") {
                let metric = cells[0].trim_start_matches("| ").trim_matches('`');
                rows.insert(metric.to_owned(), cells[1].to_owned());
            }
        }
        rows
    }

    #[test]
    fn docs_metrics_md_lists_every_declared_metric_with_its_labels_and_type() {
        let mut rows = documented();
        for m in METRICS {
            let row = if m.labels.is_empty() {
                m.name.to_owned()
            } else {
                format!("{}{{{}}}", m.name, m.labels.join(", "))
            };
            match rows.remove(&row) {
                Some(kind) => assert_eq!(kind, m.exported_type(), "docs/metrics.md: {row}"),
                None => panic!(
                    "docs/metrics.md has no row `{row}` (the metric, then its labels in braces)"
                ),
            }
        }
        assert!(
            rows.is_empty(),
            "docs/metrics.md lists metrics src/metrics.rs does not declare: {rows:?}"
        );
    }

    #[test]
    fn the_recorder_renders_every_declared_metric_with_its_help_and_type() {
        let recorder = recorder();
        metrics::with_local_recorder(&recorder, || {
            describe();
            for m in METRICS {
                let labels: Vec<Label> = m.labels.iter().map(|l| Label::new(*l, "x")).collect();
                match m.kind {
                    Kind::Counter => metrics::counter!(m.name, labels).increment(1),
                    Kind::Gauge => metrics::gauge!(m.name, labels).set(1.0),
                    Kind::Histogram => metrics::histogram!(m.name, labels).record(1.0),
                }
            }
        });
        let text = recorder.handle().render();
        for m in METRICS {
            let help = format!("# HELP {} {}\n", m.name, m.help);
            let kind = format!("# TYPE {} {}\n", m.name, m.exported_type());
            assert!(text.contains(&help), "{help}");
            assert!(text.contains(&kind), "{kind}");
        }
    }

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
