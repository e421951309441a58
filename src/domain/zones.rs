//! Time zones as data: the IANA rules (tzdata) every local time is resolved
//! with — a wall-clock job's `run_local`, a cron schedule's occurrences.
//!
//! tzdata changes several times a year (a country abolishes DST, moves its
//! end with two weeks' notice), and a job due in ten years will outlive
//! some of those changes. So the rules are data a process loads, not code
//! it was built with: [`Tzdata::from_tzif`] reads compiled zone files (the
//! operating system's `/usr/share/zoneinfo`, or any directory `zic` wrote),
//! and [`install`] swaps them in while the process runs. The rules compiled
//! into the binary ([`Tzdata::builtin`], chrono-tz) are the fallback when
//! no directory is there. Reading the directory is the tzdata service's
//! (`roles::tzdata`); this module only parses and resolves.
//!
//! Every local time resolves by one rule, the same for a one-off job and a
//! cron occurrence ([`local_resolve`]):
//! - a local time the clock skips (springing forward over it) is the first
//!   instant after it: the moment of the change;
//! - a local time that occurs twice (falling back over it) is its first
//!   occurrence.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, RwLock};

use chrono::{DateTime, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};

/// Longest zone name stored (`jobs.time_zone`).
pub const ZONE_NAME_MAX: usize = 64;
/// Longest tzdata version stored (`jobs.tzdata_version`).
pub const VERSION_MAX: usize = 16;

/// One zone's rules.
#[derive(Clone)]
pub enum Zone {
    /// From the rules compiled into the binary.
    Builtin(chrono_tz::Tz),
    /// From a loaded zone file.
    Loaded(Arc<LoadedZone>),
}

/// A zone read from its compiled file.
pub struct LoadedZone {
    name: String,
    rules: tz::TimeZone,
}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Zone {
    pub fn name(&self) -> &str {
        match self {
            Zone::Builtin(tz) => tz.name(),
            Zone::Loaded(zone) => &zone.name,
        }
    }

    /// The UTC offset in seconds at `unix_secs`. A time the file cannot
    /// place (past its rules' range) reads as UTC.
    fn offset_at(&self, unix_secs: i64) -> i32 {
        match self {
            Zone::Builtin(tz) => Utc.timestamp_opt(unix_secs, 0).single().map_or(0, |at| {
                tz.offset_from_utc_datetime(&at.naive_utc())
                    .fix()
                    .local_minus_utc()
            }),
            Zone::Loaded(zone) => zone
                .rules
                .find_local_time_type(unix_secs)
                .map_or(0, |kind| kind.ut_offset()),
        }
    }

    fn offset(&self, seconds: i32) -> ZoneOffset {
        ZoneOffset {
            zone: self.clone(),
            fixed: FixedOffset::east_opt(seconds).unwrap_or_else(|| Utc.fix()),
        }
    }
}

/// A zone's offset at one instant (chrono's `Offset` of [`Zone`]).
#[derive(Clone, Debug)]
pub struct ZoneOffset {
    zone: Zone,
    fixed: FixedOffset,
}

impl Offset for ZoneOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

impl fmt::Display for ZoneOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.fixed, f)
    }
}

impl TimeZone for Zone {
    type Offset = ZoneOffset;

    fn from_offset(offset: &ZoneOffset) -> Zone {
        offset.zone.clone()
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> LocalResult<ZoneOffset> {
        match local.and_hms_opt(0, 0, 0) {
            Some(midnight) => self.offset_from_local_datetime(&midnight),
            None => LocalResult::None,
        }
    }

    /// The offsets under which `local` is a real local time: found by
    /// trying the offsets in force a day before and a day after it (zones
    /// never change twice within two days), each kept when the instant it
    /// gives really has that offset.
    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> LocalResult<ZoneOffset> {
        if let Zone::Builtin(tz) = self {
            return tz
                .offset_from_local_datetime(local)
                .map(|offset| self.offset(offset.fix().local_minus_utc()));
        }
        let secs = local.and_utc().timestamp();
        let mut found: Vec<(i64, i32)> = Vec::with_capacity(2);
        for probe in [secs - 86_400, secs + 86_400] {
            let offset = self.offset_at(probe);
            let instant = secs - i64::from(offset);
            if self.offset_at(instant) == offset && !found.iter().any(|(_, o)| *o == offset) {
                found.push((instant, offset));
            }
        }
        found.sort_unstable();
        match found[..] {
            [] => LocalResult::None,
            [(_, only)] => LocalResult::Single(self.offset(only)),
            [(_, first), (_, second), ..] => {
                LocalResult::Ambiguous(self.offset(first), self.offset(second))
            }
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> ZoneOffset {
        match utc.and_hms_opt(0, 0, 0) {
            Some(midnight) => self.offset_from_utc_datetime(&midnight),
            None => self.offset(0),
        }
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> ZoneOffset {
        self.offset(self.offset_at(utc.and_utc().timestamp()))
    }
}

/// The instant `local` names in `zone`, by the module's rule: a skipped
/// local time is the moment of the change, a repeated one its first
/// occurrence.
pub fn local_resolve(zone: &Zone, local: NaiveDateTime) -> DateTime<Utc> {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => at.with_timezone(&Utc),
        LocalResult::None => gap_end(zone, local),
    }
}

/// The first instant whose local time in `zone` is after `local`, a local
/// time the zone skips: the moment the clock sprang forward. Found by
/// bisection (to the millisecond) between instants surely before and after.
pub fn gap_end(zone: &Zone, local: NaiveDateTime) -> DateTime<Utc> {
    // Offsets lie within ±18 hours.
    const SPAN_MS: i64 = 18 * 3_600_000;
    let naive_ms = local.and_utc().timestamp_millis();
    let (mut lo, mut hi) = (naive_ms - SPAN_MS, naive_ms + SPAN_MS);
    let at = |ms: i64| Utc.timestamp_millis_opt(ms).single();
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match at(mid) {
            Some(mid_at) if mid_at.with_timezone(zone).naive_local() > local => hi = mid,
            _ => lo = mid,
        }
    }
    at(hi).unwrap_or_else(|| local.and_utc())
}

/// A set of zone rules and the tzdata release they come from.
pub struct Tzdata {
    version: String,
    /// Where they were read from: a directory, or `built-in`.
    source: String,
    /// None: the rules compiled into the binary.
    zones: Option<HashMap<String, Zone>>,
}

impl fmt::Debug for Tzdata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tzdata")
            .field("version", &self.version)
            .field("source", &self.source)
            .field("zones", &self.zone_count())
            .finish()
    }
}

/// Why a set of zone files was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TzdataError {
    #[error("no tzdata version found (a tzdata.zi whose first line is `# version 2025b`, or a +VERSION file)")]
    NoVersion,
    #[error(
        "tzdata version {0:?} is not a release name of at most 16 letters, digits, `.`, `-` or `_`"
    )]
    BadVersion(String),
    #[error("no zone file could be read")]
    NoZones,
    #[error("zone UTC is missing")]
    NoUtc,
}

impl Tzdata {
    /// The rules compiled into this binary.
    pub fn builtin() -> Tzdata {
        Tzdata {
            version: chrono_tz::IANA_TZDB_VERSION.to_owned(),
            source: "built-in".to_owned(),
            zones: None,
        }
    }

    /// The zones of compiled zone files (`TZif`), each named by its path
    /// under the zoneinfo directory (`Europe/Berlin`). Files that are not
    /// zone files are skipped: a zoneinfo directory holds tables too.
    pub fn from_tzif(
        version: &str,
        source: &str,
        files: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> Result<Tzdata, TzdataError> {
        version_check(version)?;
        let mut zones = HashMap::new();
        for (name, bytes) in files {
            if !bytes.starts_with(b"TZif") || name.len() > ZONE_NAME_MAX {
                continue;
            }
            if let Ok(rules) = tz::TimeZone::from_tz_data(&bytes) {
                let zone = Zone::Loaded(Arc::new(LoadedZone {
                    name: name.clone(),
                    rules,
                }));
                zones.insert(name, zone);
            }
        }
        if zones.is_empty() {
            return Err(TzdataError::NoZones);
        }
        if !zones.contains_key("UTC") {
            return Err(TzdataError::NoUtc);
        }
        Ok(Tzdata {
            version: version.to_owned(),
            source: source.to_owned(),
            zones: Some(zones),
        })
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// How many zones it knows; None for the built-in rules (all of
    /// chrono-tz's).
    pub fn zone_count(&self) -> Option<usize> {
        self.zones.as_ref().map(HashMap::len)
    }

    /// The zone named `name`, exactly as IANA spells it.
    pub fn zone(&self, name: &str) -> Option<Zone> {
        match &self.zones {
            None => chrono_tz::Tz::from_str(name).ok().map(Zone::Builtin),
            Some(zones) => zones.get(name).cloned(),
        }
    }
}

/// Whether `version` may be stored as a tzdata release name.
fn version_check(version: &str) -> Result<(), TzdataError> {
    let fine = !version.is_empty()
        && version.len() <= VERSION_MAX
        && version
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if fine {
        Ok(())
    } else {
        Err(TzdataError::BadVersion(version.to_owned()))
    }
}

/// The release named by a zoneinfo directory: the first line of its
/// `tzdata.zi` (`# version 2025b`), else its `+VERSION` file.
pub fn version_read(tzdata_zi_head: Option<&str>, plus_version: Option<&str>) -> Option<String> {
    let from_zi = tzdata_zi_head
        .and_then(|text| text.lines().next())
        .and_then(|line| line.strip_prefix("# version "))
        .map(str::trim);
    from_zi
        .or_else(|| plus_version.map(str::trim))
        .filter(|version| !version.is_empty())
        .map(str::to_owned)
}

/// Whether release `candidate` is newer than `than`. IANA names releases
/// by year and letter (`2024b` < `2025a`), so they order as text; a fleet
/// moves jobs only forward, so an instance still on an older release never
/// moves one back.
pub fn version_newer(candidate: &str, than: &str) -> bool {
    candidate > than
}

static CURRENT: RwLock<Option<Arc<Tzdata>>> = RwLock::new(None);

/// The rules this process resolves local times with: the last
/// [`install`]ed, or the built-in ones.
pub fn current() -> Arc<Tzdata> {
    let read = CURRENT
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match &*read {
        Some(tzdata) => Arc::clone(tzdata),
        None => {
            drop(read);
            let mut write = CURRENT
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            Arc::clone(write.get_or_insert_with(|| Arc::new(Tzdata::builtin())))
        }
    }
}

/// Makes `tzdata` the rules of this process from now on.
pub fn install(tzdata: Tzdata) -> Arc<Tzdata> {
    let tzdata = Arc::new(tzdata);
    *CURRENT
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Arc::clone(&tzdata));
    tzdata
}

/// A job's time on a wall clock: what its `run_at` was computed from, kept
/// so that a newer tzdata can compute it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WallClock {
    pub local: NaiveDateTime,
    pub zone: String,
    /// The release `run_at` was computed with.
    pub tzdata_version: String,
}

/// Why a wall-clock time was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidWallClock {
    #[error(
        "run_local {0:?} is not a local date and time like 2027-03-28T09:00:00 (no offset, no Z)"
    )]
    Local(String),
    #[error("time_zone {0:?} is not an IANA time zone name (e.g. Europe/Berlin, UTC)")]
    Zone(String),
}

impl InvalidWallClock {
    pub fn code(&self) -> &'static str {
        match self {
            InvalidWallClock::Local(_) => "invalid_run_local",
            InvalidWallClock::Zone(_) => "invalid_time_zone",
        }
    }
}

/// A local date and time as written in `run_local`: `YYYY-MM-DDTHH:MM`
/// with optional seconds and fraction, no offset; truncated to the
/// millisecond.
pub fn local_parse(text: &str) -> Result<NaiveDateTime, InvalidWallClock> {
    let invalid = || InvalidWallClock::Local(text.chars().take(64).collect());
    let parsed = ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .ok_or_else(invalid)?;
    let truncated =
        DateTime::from_timestamp_millis(parsed.and_utc().timestamp_millis()).ok_or_else(invalid)?;
    Ok(truncated.naive_utc())
}

/// `local` in zone `zone_name` under `tzdata`: the instant, and the wall
/// clock to keep beside it.
pub fn wall_resolve(
    tzdata: &Tzdata,
    local: NaiveDateTime,
    zone_name: &str,
) -> Result<(DateTime<Utc>, WallClock), InvalidWallClock> {
    let zone = tzdata
        .zone(zone_name)
        .ok_or_else(|| InvalidWallClock::Zone(zone_name.chars().take(64).collect()))?;
    let at = local_resolve(&zone, local);
    let wall = WallClock {
        local,
        zone: zone_name.to_owned(),
        tzdata_version: tzdata.version().to_owned(),
    };
    Ok((at, wall))
}

/// What a newer tzdata makes of a wall-clock time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recomputed {
    /// Its instant is where it was.
    Same,
    /// Its instant is now `to`.
    Moved { to: DateTime<Utc> },
    /// The release lacks its zone: it stays at its instant.
    UnknownZone,
}

/// Computes `wall` again under `tzdata`, against `at`: the instant the job
/// holds for it (its window's start, with a window).
pub fn wall_recompute(tzdata: &Tzdata, wall: &WallClock, at: DateTime<Utc>) -> Recomputed {
    let Some(zone) = tzdata.zone(&wall.zone) else {
        return Recomputed::UnknownZone;
    };
    let to = local_resolve(&zone, wall.local);
    if to == at {
        Recomputed::Same
    } else {
        Recomputed::Moved { to }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(text: &str) -> NaiveDateTime {
        local_parse(text).unwrap()
    }

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    /// The system's zone files, when this machine has them.
    fn system() -> Option<Tzdata> {
        let dir = std::path::Path::new("/usr/share/zoneinfo");
        let read = |name: &str| {
            std::fs::read(dir.join(name))
                .ok()
                .map(|b| (name.to_owned(), b))
        };
        let files: Vec<_> = [
            "UTC",
            "Europe/Berlin",
            "Australia/Melbourne",
            "America/New_York",
        ]
        .iter()
        .filter_map(|name| read(name))
        .collect();
        (files.len() == 4).then(|| Tzdata::from_tzif("2099z", "test", files).unwrap())
    }

    #[test]
    fn local_times_parse_without_offsets_to_the_millisecond() {
        assert_eq!(local("2027-03-28T09:00").to_string(), "2027-03-28 09:00:00");
        assert_eq!(
            local("2027-03-28T09:00:00.123456").to_string(),
            "2027-03-28 09:00:00.123"
        );
        for bad in [
            "2027-03-28T09:00:00Z",
            "2027-03-28",
            "09:00",
            "2027-02-30T09:00",
            "",
        ] {
            assert!(local_parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn gaps_and_folds_follow_the_cron_rule_on_both_rule_sets() {
        let mut sets = vec![Tzdata::builtin()];
        sets.extend(system());
        for tzdata in &sets {
            let berlin = tzdata.zone("Europe/Berlin").unwrap();
            // 2027-03-28 02:30 does not exist in Berlin: the change, 01:00Z.
            assert_eq!(
                local_resolve(&berlin, local("2027-03-28T02:30")),
                utc("2027-03-28T01:00:00Z"),
                "{}",
                tzdata.source()
            );
            // 2027-10-31 02:30 happens twice: the first, still CEST.
            assert_eq!(
                local_resolve(&berlin, local("2027-10-31T02:30")),
                utc("2027-10-31T00:30:00Z")
            );
            assert_eq!(
                local_resolve(&berlin, local("2027-07-01T09:00")),
                utc("2027-07-01T07:00:00Z")
            );
            let melbourne = tzdata.zone("Australia/Melbourne").unwrap();
            assert_eq!(
                local_resolve(&melbourne, local("2027-11-12T08:00")),
                utc("2027-11-11T21:00:00Z")
            );
        }
    }

    #[test]
    fn loaded_and_builtin_rules_agree_over_years() {
        let Some(loaded) = system() else { return };
        let builtin = Tzdata::builtin();
        for name in ["Europe/Berlin", "Australia/Melbourne", "America/New_York"] {
            let (a, b) = (loaded.zone(name).unwrap(), builtin.zone(name).unwrap());
            let mut at = local("2026-01-01T00:30");
            while at < local("2032-01-01T00:00") {
                assert_eq!(local_resolve(&a, at), local_resolve(&b, at), "{name} {at}");
                at += chrono::Duration::minutes(97 * 60 + 13);
            }
        }
    }

    #[test]
    fn unknown_zones_and_files_are_refused() {
        assert!(wall_resolve(
            &Tzdata::builtin(),
            local("2027-01-01T00:00"),
            "Mars/Olympus"
        )
        .is_err());
        assert_eq!(
            Tzdata::from_tzif("2025b", "x", [("UTC".to_owned(), b"not tzif".to_vec())])
                .unwrap_err(),
            TzdataError::NoZones
        );
        assert!(matches!(
            Tzdata::from_tzif("2025b; DROP", "x", []),
            Err(TzdataError::BadVersion(_))
        ));
    }

    #[test]
    fn versions_are_read_and_ordered_as_releases() {
        assert_eq!(
            version_read(Some("# version 2025b\n# ddeps\n"), Some("2024a")),
            Some("2025b".to_owned())
        );
        assert_eq!(
            version_read(None, Some("2024a\n")),
            Some("2024a".to_owned())
        );
        assert_eq!(version_read(Some("# other"), None), None);
        assert!(version_newer("2025a", "2024b"));
        assert!(version_newer("2025b", "2025a"));
        assert!(!version_newer("2025a", "2025a"));
    }
}
