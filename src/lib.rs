//! tickler — a durable scheduler for delayed Kafka messages.
//!
//! A job is "produce this payload to topic T at time t". MySQL holds every
//! job and decides every state change; Redis indexes only the jobs due
//! within a window; Kafka receives them when due. See docs/architecture.md.
//!
//! Module map:
//! - [`config`]     — settings from defaults, a file and `TICKLER_*` variables
//! - [`clock`]      — tickler's now: the stores' clocks, moved only by
//!   `tickler dev`
//! - [`job`]        — the job, its states and validation rules; sharding;
//!   how times are written
//! - [`keys`]       — encryption at rest: AES-256-GCM under named keys
//! - [`policy`]     — a job's result policy: attempts, backoff, ack timeout
//! - [`topic_pattern`] — `orders.*`: the topic patterns of tokens and
//!   `jobs.topics_allowed`
//! - [`store`]      — MySQL: the only code that speaks SQL; migrations
//! - [`index`]      — Redis: the only code that speaks Redis; scripts in `lua/`
//! - [`service`]    — the one loop of every role that works in passes
//! - [`loader`]     — moves jobs entering the window from MySQL to Redis
//! - [`dispatcher`] — claims due jobs, wins the MySQL CAS, produces to Kafka
//! - [`reconciler`] — repairs from MySQL: claims in doubt (settled by
//!   reading their topic back), jobs Redis lost, ack deadlines passed in
//!   silence
//! - [`purger`]     — deletes finished jobs past their retention
//! - [`quotas`]     — counts again what each token with a quota holds
//! - [`outcome`]    — what becomes of a job after an attempt: reports, and
//!   the decision each leads to (pure logic)
//! - [`resolver`]   — applies an attempt's outcome, from every channel, and
//!   makes Redis follow
//! - [`results`]    — consumes the results topic; produces dead letters
//! - [`ingress`]    — jobs scheduled by producing to a request topic;
//!   replies
//! - [`membership`] — instances know each other; shard leases and fencing;
//!   a dead instance's claims put in doubt
//! - [`clock_guard`] — `tickler dev` and `tickler serve` never share a
//!   database: checked at start, before each clock move and while running
//! - [`auth`]       — API tokens: secrets, scopes, topic patterns; the cache
//! - [`topic_controls`] — topic controls (pause, pace): this instance's copy
//! - [`schedule`]   — recurring schedules: cron and intervals in a time
//!   zone, misfires (pure logic)
//! - [`materializer`] — a schedule's occurrences become jobs
//! - [`bulk`]       — the bulk runner: carries out bulk operations in batches
//! - [`truth`]      — the figures of MySQL, Redis and Kafka as they are now
//! - [`reporter`]   — publishes the truth as gauges, and hands it to `notify`
//! - [`notify`]     — the webhook for dead jobs and backlogs
//! - [`api`]        — HTTP/JSON under `/v1`, `/healthz`, `/metrics`
//! - [`app`]        — starts the roles under one cancellation token
//! - [`kafka`]      — Kafka client settings, topic administration, reading
//!   records back
//! - [`metrics`]    — every metric name, and the Prometheus recorder
//! - [`doctor`]     — checks the stores against each other; the safe repairs
//! - [`cli`]        — the commands: `tickler jobs`, `topics`, `schedules`
//!   (over the API), `doctor`, `token`, `instances`, `shards`
//!
//! `tickler bench` (the benchmark harness) and `tickler demo` (the README's
//! demonstration client) are the binary's own modules, in src/bin/tickler/:
//! no serving role uses them, and they use only the library's public API.

/// A named fail point for the fault tests: with the `failpoints` feature,
/// the `FAILPOINTS` environment variable can make it panic (tikv's `fail`
/// crate, e.g. `FAILPOINTS='dispatcher-claimed=panic'`); without it,
/// nothing at all. Names in use: `dispatcher-claimed` (a batch claimed,
/// before it is handed on to be sent), `dispatcher-settle` (records sent,
/// before their outcome is recorded), and for [`fail_point_stall`]
/// `dispatcher-stall` (a batch won in MySQL, before it is handed on),
/// `membership-leave` (an instance stopping, before it leaves).
macro_rules! fail_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        fail::fail_point!($name);
    };
}

/// An `async` fail point that, set to `return`
/// (`FAILPOINTS='dispatcher-stall=return'`), never resolves: a call to a
/// store that does not return (a half-open connection). Other actions as
/// for [`fail_point`].
macro_rules! fail_point_stall {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            if fail::eval($name, |_| ()).is_some() {
                std::future::pending::<()>().await;
            }
        }
    };
}

pub mod api;
pub mod app;
pub mod audit;
pub mod auth;
pub mod bulk;
pub mod cli;
pub mod clock;
pub mod clock_guard;
pub mod codec_upkeep;
pub mod compression;
pub mod config;
pub mod dispatcher;
pub mod doctor;
pub mod grouping;
pub mod index;
pub mod ingress;
pub mod job;
pub mod kafka;
pub mod keys;
pub mod loader;
pub mod materializer;
pub mod membership;
pub mod metrics;
pub mod notify;
pub mod outcome;
pub mod policy;
pub mod purger;
pub mod quotas;
pub mod rate;
pub mod reconciler;
pub mod reporter;
pub mod resolver;
pub mod results;
pub mod schedule;
pub mod service;
pub mod store;
pub mod telemetry;
pub mod topic_controls;
pub mod topic_pattern;
pub mod truth;
pub mod watermarks;
