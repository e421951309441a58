//! The store: the only code that speaks SQL. MySQL is the source of truth,
//! so every state change here is a compare-and-set on `status` (and, for a
//! claim, a token) — MySQL decides, Redis only suggests.
//!
//! The SQL runs on MySQL 8.0 and MariaDB 10.6+: no `RETURNING`, no
//! engine-only functions. "Now" is always the database's `UTC_TIMESTAMP(3)`,
//! never a tickler host's clock, and sessions are forced to UTC.
//!
//! This file is the store's face: the map of its files and what they make
//! public. The [`Actor`] who writes and the [`Store`] handle with its
//! constructors are `handle.rs`'s; the statements' files add their methods
//! to the handle. A job's payload and headers are compressed, sealed, opened
//! and expanded in one place, `payload.rs`; a new job's id is known before
//! its INSERT, from a block `id_blocks.rs` reserves. The history is
//! `history.rs`'s; what people change by hand in SQL is recorded by a
//! trigger there or, without one, observed by `hand_edits.rs`. Below the statements' files lie the error and its
//! classes (`error.rs`), failover's demoted connections (`failover.rs`),
//! connecting and the pool's hooks (`pool.rs`), and the shared SQL
//! fragments with the session clock (`sql.rs`).

mod audit;
mod bulk;
mod cluster;
mod compression;
mod consumption;
mod debounce;
mod dispatch;
mod error;
mod failover;
mod forecast;
mod hand_edits;
mod handle;
mod history;
mod holds;
mod id_blocks;
mod job_row;
mod jobs;
mod migrate;
mod payload;
mod pool;
mod quotas;
mod results;
mod schedules;
pub mod scratch;
mod sealing;
mod sql;
mod stats;
mod tokens;
mod topics;
mod verify;
mod wall_clock;
mod watermarks;

pub use audit::{AuditEntry, AuditFilter, AuditRow};
pub use bulk::{BulkAction, BulkBatch, BulkFilter, BulkOp, BulkStatus};
pub use cluster::{instances_describe, Beat, Fence, InstanceInfo, InstanceRow, LeaseRow};
pub use compression::{CompressionSample, DictInfo, PayloadSamples};
pub use consumption::{Consumed, OffsetSample};
pub use debounce::Debounced;
pub use dispatch::{ClaimOutcome, Dispatched, Doubt, Marked};
pub use error::StoreError;
pub use forecast::DueCount;
pub use hand_edits::{HandEditsChecked, OBSERVE_OVERLAP};
pub use handle::{Actor, Store};
pub use history::{BrokenTrigger, HandEditsState};
pub use holds::{HoldReleased, SCHEMA as HOLDS_SCHEMA};
pub use job_row::WindowEntry;
pub use jobs::{BatchRow, Cancelled, JobChanges, JobEvent, JobFilter, Modified};
pub use migrate::{built_for, newest as schema_newest};
pub use pool::tls_probe;
pub use quotas::QuotaUsage;
pub use results::{DeadLetter, Decided, Disposition, Redriven};
pub use schedules::{
    occurrence_job, occurrence_placed, schedule_job, Materialized, NewSchedule, PendingOccurrences,
    Placed, ScheduleDef, ScheduleFires, ScheduleRow, ScheduleStats, ScheduleStatus, ScheduleUpdate,
};
pub use sealing::{instance_may_hold, KeyCount, KeyUsed, Rotation, SCHEMA as SEALING_SCHEMA};
pub use stats::{CountCursor, DeadSince, Overdue, Position, TopicCount, COUNTED};
pub use tokens::{NewToken, TokenRow};
pub use topics::{JobPacing, OverdueDrain, TopicChange, TopicControl};
pub use verify::{SweepMark, VerifyTally};
pub use wall_clock::WallRow;
pub use watermarks::Watermark;
