//! tickler — a durable scheduler for delayed Kafka messages.
//!
//! A job is "produce this payload to topic T at time t". MySQL holds every
//! job and decides every state change; Redis indexes only the jobs due
//! within a window; Kafka receives them when due. See docs/architecture.md.
//!
//! Module map, by floor — each floor uses only those below it:
//! - [`api`], [`cli`], [`app`] — the edges: HTTP/JSON under `/v1`; the
//!   commands; starting the roles under one cancellation token
//! - [`roles`]      — what runs: the jobs service (the one way a job is
//!   written), the dispatcher, loader, reconciler, ingress, results and the
//!   rest, each on the one service loop
//! - [`store`]      — MySQL: the only code that speaks SQL; migrations
//! - [`index`]      — Redis: the only code that speaks Redis; scripts in `lua/`
//! - [`kafka`]      — Kafka client settings, topic administration, reading
//!   records back
//! - [`domain`]     — pure logic: the job and its rules, policies, outcomes,
//!   schedules, topic patterns, grouping, the clock, keys, compression
//! - [`config`]     — settings from defaults, a file and `TICKLER_*` variables
//! - [`metrics`]    — every metric name, and the Prometheus recorder
//! - [`telemetry`]  — logs and traces
//!
//! `tests/layout.rs` holds this map against the tree. `tickler bench` (the
//! benchmark harness) and `tickler demo` (the README's demonstration
//! client) are the binary's own modules, in src/bin/tickler/: no serving
//! role uses them, and they use only the library's public API.

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

/// An `async` fail point that, set to `return(<ms>)`, waits that long: the
/// race tests hold a compare-and-set between its read and its write while
/// they change the row (`FAILPOINTS` or `fail::cfg`). Without the
/// `failpoints` feature, nothing at all. Names in use: `results-read`,
/// `job-modify-read`, `schedule-planned`, `bulk-read`,
/// `debounce-read`, `claim-written`, `rescue-read`, `recount-read`
/// (tests/cas_races.rs), `hand-edits-read` (tests/hand_edits.rs).
macro_rules! fail_point_pause {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            if let Some(Some(ms)) = fail::eval($name, |ms| ms.and_then(|ms| ms.parse::<u64>().ok()))
            {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
        }
    };
}

pub mod api;
pub mod app;
pub mod cli;
pub mod config;
pub mod domain;
pub mod index;
pub mod kafka;
pub mod metrics;
pub mod roles;
pub mod store;
pub mod telemetry;
