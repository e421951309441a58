//! The roles: what an instance runs, each service on the one loop of
//! [`service`], writing through [`store`](crate::store) and making
//! [`index`](crate::index) follow. Which role runs which services is said
//! once, in `crate::app`'s role table.
//!
//! - [`jobs`]       — the jobs service: the one way a job is created,
//!   modified, cancelled or redriven, from every edge
//! - [`service`]    — the one loop of every role that works in passes
//! - [`loader`]     — moves jobs entering the window from MySQL to Redis
//! - [`dispatcher`] — claims due jobs, wins the MySQL CAS, produces to Kafka
//! - [`verifier`]   — reads produced records back at their position: proof
//!   each is on its topic, or produced again
//! - [`reconciler`] — repairs from MySQL: claims in doubt (settled by
//!   reading their topic back), jobs Redis lost, ack deadlines passed in
//!   silence
//! - [`consumption`] — follows the consumer groups reading tickler's topics:
//!   when each job was consumed, and groups that stopped
//! - [`purger`]     — deletes finished jobs past their retention
//! - [`hand_edits`] — hand edits in SQL recorded in the history without a
//!   trigger (`mysql.history_hand_edits = observe`)
//! - [`overdue_caps`] — a topic's `max_overdue`: what a backlog past it
//!   becomes (alerted, or its oldest expired)
//! - [`materializer`] — a schedule's occurrences become jobs
//! - [`occurrences`] — occurrences a person asks for: a trigger (one more,
//!   now) and a backfill (the missing ones of a past interval)
//! - [`membership`] — instances know each other; shard leases and fencing;
//!   a dead instance's claims put in doubt
//! - [`watermarks`] — the loader's and reconciler's shared high-water marks
//! - [`quotas`]     — counts again what each token with a quota holds
//! - [`bulk`]       — the bulk runner: carries out bulk operations in batches
//! - [`topic_controls`] — topic controls (pause, pace): this instance's copy
//! - [`tzdata`]     — the time-zone rules, reloaded when their release
//!   changes; wall-clock jobs moved where a newer release changes them
//! - [`resolver`]   — applies an attempt's outcome, from every channel, and
//!   makes Redis follow
//! - [`results`]    — consumes the results topic; produces dead letters
//! - [`ingress`]    — jobs scheduled by producing to a request topic;
//!   replies
//! - [`kafka_topics`] — the broker's topics, refreshed for the pre-flight
//!   check and the dispatcher
//! - [`codec_upkeep`] — which key seals and which dictionary compresses
//! - [`reporter`]   — the truth of the three stores as gauges
//!   ([`reporter::truth`]), and the webhook ([`reporter::notify`])
//! - [`auth`]       — API tokens: secrets, scopes, topic patterns; the
//!   cache; the shared rate limit ([`auth::rate`])
//! - [`audit`]      — the audit log's writers outside the API
//! - [`clock_guard`] — `tickler dev` and `tickler serve` never share a
//!   database
//! - [`doctor`]     — checks the stores against each other; the safe repairs

pub mod audit;
pub mod auth;
pub mod bulk;
pub mod clock_guard;
pub mod codec_upkeep;
pub mod consumption;
pub mod dispatcher;
pub mod doctor;
pub mod hand_edits;
pub mod ingress;
pub mod jobs;
pub mod kafka_topics;
pub mod loader;
pub mod materializer;
pub mod membership;
pub mod occurrences;
pub mod overdue_caps;
pub mod purger;
pub mod quotas;
pub mod reconciler;
pub mod reporter;
pub mod resolver;
pub mod results;
pub mod service;
pub mod topic_controls;
pub mod tzdata;
pub mod verifier;
pub mod watermarks;
