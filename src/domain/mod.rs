//! The domain: pure logic, no store, no network. What a job is and the
//! rules it is checked by; what becomes of it after an attempt; when a
//! schedule fires. Every floor above uses it; it uses only the
//! configuration's types.
//!
//! - [`job`]        — the job, its states and validation rules; sharding;
//!   how times are written
//! - [`request`]    — a create request and the rules it is checked by: the
//!   one builder of a new job, whichever edge it comes from
//! - [`policy`]     — a job's result policy: attempts, backoff, ack timeout
//! - [`outcome`]    — what becomes of a job after an attempt: reports, and
//!   the decision each leads to
//! - [`schedule`]   — recurring schedules: cron and intervals in a time
//!   zone, misfires
//! - [`fires`]      — a schedule's fires audited: the occurrences its
//!   timing expected in an interval, and what became of each
//! - [`topic_pattern`] — `orders.*`: the topic patterns of tokens and
//!   `jobs.topics_allowed`
//! - [`grouping`]   — which group a job belongs to for fair dispatch
//! - [`clock`]      — tickler's now: the stores' clocks, moved only by
//!   `tickler dev`
//! - [`keys`]       — encryption at rest: AES-256-GCM under named keys
//! - [`compression`] — payload compression: zstd with trained dictionaries
//! - [`delivery`]   — proof of delivery: a produced record's position, and
//!   which records are read back (`dispatcher.verify`)
//! - [`payload_schema`] — a topic's JSON Schema: compiling it, checking a
//!   payload against it
//! - [`zones`]      — time zones as data: the loaded tzdata, wall-clock
//!   times and how a local time resolves

pub mod clock;
pub mod compression;
pub mod delivery;
pub mod fires;
pub mod grouping;
pub mod job;
pub mod keys;
pub mod outcome;
pub mod payload_schema;
pub mod policy;
pub mod request;
pub mod schedule;
pub mod topic_pattern;
pub mod zones;
