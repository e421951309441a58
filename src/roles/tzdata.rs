//! tzdata (#60): the time-zone rules this instance resolves local times
//! with, read from a zoneinfo directory (`tzdata.path`) and reloaded when
//! its release changes — an operating-system tzdata update, or a directory
//! `zic` wrote — without a restart or a new build. Two services:
//!
//! - `tzdata`, on every instance: looks at the directory's release every
//!   `tzdata.check_ms` and loads a newer one (each instance says which it
//!   has in its `instances` row; the doctor flags a fleet that disagrees);
//! - `wall clock`, in the reconciler's role: the pending wall-clock jobs
//!   (and schedule occurrences) of an older release are computed again
//!   under the loaded one; those whose instant changed are moved through
//!   the jobs service (a history row by actor `tzdata:RELEASE`), the rest
//!   are stamped with the release. A release is never applied backwards:
//!   an instance still on an older one leaves newer rows alone.
//!
//! Jobs retrying after an attempt (`attempt > 1`) keep the instant their
//! backoff gave them: only the release is stamped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::domain::job::{Expiry, JobId, Schedule, Window};
use crate::domain::zones::{self, Recomputed, Tzdata, TzdataError, WallClock};
use crate::metrics;
use crate::roles::jobs::Jobs;
use crate::roles::service::Service;
use crate::store::{JobChanges, Modified, StoreError, WallRow};

/// Rows computed again in one statement's page.
const PAGE: u32 = 500;
/// Once every row of the loaded release is computed, the scan is made
/// again this often: rows an instance still on an older release wrote
/// meanwhile.
const SWEEP_AGAIN: Duration = Duration::from_secs(600);
/// Deepest directory read under the zoneinfo root (`America/Argentina/Salta`).
const DEPTH_MAX: usize = 4;
/// Subdirectories of a zoneinfo root that are not zones of their own name:
/// `posix/` repeats the root, `right/` counts leap seconds (which UTC
/// instants do not).
const SKIPPED: [&str; 4] = ["posix", "right", "posixrules", "localtime"];

#[derive(Debug, Clone)]
pub struct TzdataConfig {
    /// The zoneinfo directory; None: the built-in rules.
    pub path: Option<PathBuf>,
    pub check: Duration,
}

impl TzdataConfig {
    pub fn from_config(config: &Config) -> Self {
        let path = config.tzdata.path.trim();
        TzdataConfig {
            path: (path != "builtin").then(|| PathBuf::from(path)),
            check: Duration::from_millis(config.tzdata.check_ms),
        }
    }
}

/// Why a zoneinfo directory was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum TzdataReadError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Rules { path: String, source: TzdataError },
}

/// The release a zoneinfo directory holds: the first line of its
/// `tzdata.zi`, else its `+VERSION`. Cheap: read every check.
pub fn version_of(dir: &Path) -> Option<String> {
    let head = std::fs::read(dir.join("tzdata.zi")).ok().map(|bytes| {
        let end = bytes
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end.min(256)]).into_owned()
    });
    let plus = std::fs::read_to_string(dir.join("+VERSION")).ok();
    zones::version_read(head.as_deref(), plus.as_deref())
}

/// Every zone file under `dir`, named by its path (`Europe/Berlin`), with
/// its release.
pub fn tzdata_read(dir: &Path) -> Result<Tzdata, TzdataReadError> {
    let shown = dir.display().to_string();
    let version = version_of(dir).ok_or_else(|| TzdataReadError::Rules {
        path: shown.clone(),
        source: TzdataError::NoVersion,
    })?;
    let mut files = Vec::new();
    files_read(dir, "", 0, &mut files).map_err(|source| TzdataReadError::Io {
        path: shown.clone(),
        source,
    })?;
    Tzdata::from_tzif(&version, &shown, files).map_err(|source| TzdataReadError::Rules {
        path: shown,
        source,
    })
}

fn files_read(
    dir: &Path,
    prefix: &str,
    depth: usize,
    out: &mut Vec<(String, Vec<u8>)>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') || (depth == 0 && SKIPPED.contains(&name.as_str())) {
            continue;
        }
        let full = format!("{prefix}{name}");
        let path = entry.path();
        // Follows links: distributions link old names to new ones.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if depth + 1 < DEPTH_MAX {
                files_read(&path, &format!("{full}/"), depth + 1, out)?;
            }
        } else if meta.len() <= 1 << 20 {
            // A file that vanished or cannot be read is not a zone.
            if let Ok(bytes) = std::fs::read(&path) {
                out.push((full, bytes));
            }
        }
    }
    Ok(())
}

/// The rules an instance starts with: the configured directory's, or the
/// built-in ones when it cannot be read (logged). Installed before any
/// role starts, so that the first request is resolved with them.
pub fn load_at_start(config: &TzdataConfig) -> Arc<Tzdata> {
    let tzdata = match &config.path {
        None => Tzdata::builtin(),
        Some(dir) => match tzdata_read(dir) {
            Ok(tzdata) => tzdata,
            Err(err) => {
                tracing::warn!(error = %err, builtin = zones::Tzdata::builtin().version(), "the tzdata directory cannot be loaded: local times resolve with the built-in rules");
                Tzdata::builtin()
            }
        },
    };
    metrics::tzdata_loaded(tzdata.version(), tzdata.source(), None);
    zones::install(tzdata)
}

/// The release `config` names, for `tickler config`: its version, where
/// it is read from, how many zones, or why it cannot be read (then the
/// built-in rules are what an instance uses).
pub fn describe(config: &TzdataConfig) -> serde_json::Value {
    let shown = |tzdata: &Tzdata| {
        serde_json::json!({
            "version": tzdata.version(),
            "source": tzdata.source(),
            "zones": tzdata.zone_count(),
        })
    };
    match &config.path {
        None => shown(&Tzdata::builtin()),
        Some(dir) => match tzdata_read(dir) {
            Ok(tzdata) => shown(&tzdata),
            Err(err) => {
                let mut value = shown(&Tzdata::builtin());
                value["error"] = serde_json::Value::String(err.to_string());
                value
            }
        },
    }
}

/// What a reload pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// The release loaded, when it changed.
    pub loaded: Option<String>,
}

/// `tzdata`: reloads the directory when its release changes.
pub struct TzdataReload {
    config: TzdataConfig,
}

impl TzdataReload {
    pub fn new(config: TzdataConfig) -> Self {
        TzdataReload { config }
    }
}

impl Service for TzdataReload {
    type Report = ReloadReport;
    type Error = StoreError;
    const NAME: &'static str = "tzdata";
    const PASS: &'static str = "tzdata reload";

    fn interval(&self) -> Duration {
        self.config.check
    }

    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<ReloadReport, StoreError> {
        let Some(dir) = &self.config.path else {
            return Ok(ReloadReport::default());
        };
        let current = zones::current();
        let Some(version) = version_of(dir) else {
            return Ok(ReloadReport::default());
        };
        if version == current.version() && current.source() != "built-in" {
            return Ok(ReloadReport::default());
        }
        match tzdata_read(dir) {
            Ok(tzdata) => {
                metrics::tzdata_loaded(
                    tzdata.version(),
                    tzdata.source(),
                    Some((current.version(), current.source())),
                );
                let loaded = tzdata.version().to_owned();
                zones::install(tzdata);
                Ok(ReloadReport {
                    loaded: Some(loaded),
                })
            }
            Err(err) => {
                // Half-written by an update in progress: the next check.
                tracing::warn!(error = %err, "the tzdata directory changed but cannot be loaded; keeping the rules loaded");
                Ok(ReloadReport::default())
            }
        }
    }
}

/// What a pass of the wall clock did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WallReport {
    /// The release the rows were computed under.
    pub release: String,
    pub checked: usize,
    pub moved: usize,
    pub kept: u64,
    pub unknown_zone: usize,
    /// Whether more rows wait for the next page.
    pub more: bool,
}

/// `wall clock`: the pending wall-clock jobs of older releases computed
/// again under the loaded one.
pub struct WallClockMover {
    jobs: Jobs,
    check: Duration,
    /// The release whose scan ended, and when.
    swept: Option<(String, Instant)>,
    /// Where the scan goes on from (a row's release and id), and the
    /// release it scans for: a newer one loaded starts it again.
    cursor: Option<(String, (String, JobId))>,
}

impl WallClockMover {
    pub fn new(jobs: Jobs, config: &TzdataConfig) -> Self {
        WallClockMover {
            jobs,
            check: config.check,
            swept: None,
            cursor: None,
        }
    }

    /// Moves one job whose instant changed: its time (its window's with
    /// one, its decided instant shifted alike) and its wall clock stamped
    /// with the release, at the version read. An occurrence's expiry (its
    /// schedule's misfire grace) moves with it; a job's own `expires_at`
    /// does not: a not-after is never put later. A job moved past it ends
    /// `expired` when it falls due, unsent (counted as
    /// `moved_past_expiry`).
    async fn move_one(
        &self,
        jobs: &Jobs,
        row: &WallRow,
        wall: &WallClock,
        to: DateTime<Utc>,
        release: &str,
    ) -> Result<bool, StoreError> {
        let held = row.window_start.unwrap_or(row.schedule_time);
        let shift = to - held;
        let changes = JobChanges {
            schedule: Some(Schedule::At(row.schedule_time + shift)),
            window: row.window_ms.map(|ms| {
                Some(Window {
                    ms,
                    start: Schedule::At(to),
                })
            }),
            wall: Some(Some(WallClock {
                tzdata_version: release.to_owned(),
                ..wall.clone()
            })),
            expiry: row
                .expires_at
                .filter(|_| row.occurrence)
                .and_then(|at| at.checked_add_signed(shift))
                .map(|at| Some(Expiry::At(at))),
            ..JobChanges::default()
        };
        let applied = matches!(
            jobs.modify(row.id, row.version, &changes, None).await?,
            Modified::Applied(..)
        );
        if applied {
            metrics::tzdata_job("moved", row.id, &wall.zone, shift.num_milliseconds());
            let past = row.expires_at.filter(|at| !row.occurrence && *at < to);
            if past.is_some() {
                metrics::tzdata_job(
                    "moved_past_expiry",
                    row.id,
                    &wall.zone,
                    shift.num_milliseconds(),
                );
            }
        }
        Ok(applied)
    }
}

impl Service for WallClockMover {
    type Report = WallReport;
    type Error = StoreError;
    const NAME: &'static str = "wall clock";
    const PASS: &'static str = "wall clock";

    fn interval(&self) -> Duration {
        self.check
    }

    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<WallReport, StoreError> {
        let tzdata = zones::current();
        let release = tzdata.version().to_owned();
        let mut report = WallReport {
            release: release.clone(),
            ..WallReport::default()
        };
        if let Some((swept, at)) = &self.swept {
            if *swept == release && at.elapsed() < SWEEP_AGAIN {
                return Ok(report);
            }
        }
        if self.cursor.as_ref().is_some_and(|(of, _)| *of != release) {
            self.cursor = None;
        }
        let after = self
            .cursor
            .as_ref()
            .map(|(_, (row_release, id))| (row_release.as_str(), *id));
        let rows = self
            .jobs
            .store()
            .job_wall_stale(&release, after, PAGE)
            .await?;
        let jobs = self
            .jobs
            .writing_as(self.jobs.store().with_actor(&format!("tzdata:{release}")));
        let mut same = Vec::new();
        for row in &rows {
            report.checked += 1;
            let Some(wall) = row.wall.as_ref().filter(|_| row.attempt <= 1) else {
                same.push(row.id);
                continue;
            };
            let held = row.window_start.unwrap_or(row.schedule_time);
            match zones::wall_recompute(&tzdata, wall, held) {
                Recomputed::Same => same.push(row.id),
                Recomputed::Moved { to } => {
                    if self.move_one(&jobs, row, wall, to, &release).await? {
                        report.moved += 1;
                    }
                }
                Recomputed::UnknownZone => {
                    report.unknown_zone += 1;
                    metrics::tzdata_job("unknown_zone", row.id, &wall.zone, 0);
                }
            }
        }
        report.kept = self.jobs.store().job_wall_stamp(&same, &release).await?;
        metrics::tzdata_kept(report.kept);
        report.more = rows.len() == PAGE as usize;
        self.cursor = rows
            .last()
            .map(|row| (release.clone(), (row.tzdata_version.clone(), row.id)));
        if !report.more {
            self.swept = Some((release, Instant::now()));
            self.cursor = None;
        }
        Ok(report)
    }

    fn passed(&self, report: &WallReport) -> bool {
        if report.moved > 0 || report.unknown_zone > 0 {
            tracing::info!(
                tzdata = report.release,
                checked = report.checked,
                moved = report.moved,
                kept = report.kept,
                unknown_zone = report.unknown_zone,
                "wall-clock jobs computed again under a newer tzdata"
            );
        }
        report.more
    }
}
