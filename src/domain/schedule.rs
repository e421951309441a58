//! Recurring schedules: when their occurrences fall, and what to create
//! when some were missed. Pure logic only — no IO — so the time-zone and
//! misfire rules are unit-tested here.
//!
//! Time zones follow two rules, for every cron schedule:
//! - a local time that does not exist (the clock springs forward over it)
//!   fires once, at the first instant after it: the moment of the change;
//! - a local time that occurs twice (the clock falls back over it) fires
//!   once, at its first occurrence.
//!
//! Occurrences are found by walking the *local* calendar with the cron
//! expression (croner), then resolving each local time to an instant with
//! the zone's rules (the loaded tzdata, [`zones`]); instants strictly increase, so a local
//! time is never fired twice and a folded hour is not repeated.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, LocalResult, TimeZone, Utc};
use croner::parser::{CronParser, Seconds};
use croner::Cron;
use serde::{Deserialize, Serialize};

use crate::domain::zones::{self, WallClock, Zone};

/// Most candidate local times looked at to find one occurrence; a cron
/// expression that matches nothing (30 February) gives up before.
const SEARCH_MAX: usize = 1_000;
/// Shortest `every_ms`.
pub const EVERY_MIN_MS: u64 = 1_000;
/// Longest `every_ms`: a hundred years.
pub const EVERY_MAX_MS: u64 = 100 * 366 * 86_400_000;
/// Longest cron expression (the `schedules.cron` column).
pub const CRON_MAX_CHARS: usize = 255;
/// Most occurrences created in one pass over one schedule; the rest follow
/// in the next pass.
pub const CREATE_MAX_PER_PASS: usize = 500;
/// Most payload and header bytes one pass writes in its transaction: each
/// occurrence is a job row carrying the schedule's payload, and TiDB fails
/// a transaction over 100 MiB (`txn-total-size-limit`), MySQL's binary log
/// writes one as a whole. A schedule of 1 MiB payloads makes 32 a pass.
pub const PASS_BYTES_MAX: usize = 32 << 20;

/// How many occurrences one pass may create for a schedule whose payload
/// and headers take `bytes`: at least one, so a schedule always advances.
pub fn create_max_per_pass(bytes: usize) -> usize {
    (PASS_BYTES_MAX / bytes.max(1)).clamp(1, CREATE_MAX_PER_PASS)
}
/// Most missed occurrences walked one by one before jumping to the present.
const MISSED_WALK_MAX: usize = 100_000;

/// Why a schedule's timing was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTiming {
    #[error("give cron (with time_zone) or every_ms, not both")]
    Both,
    #[error("give cron (5 or 6 fields, with time_zone) or every_ms")]
    Neither,
    #[error("cron {expr:?} is not a cron expression of 5 fields (minute hour day month weekday) or 6 (second first): {why}")]
    Cron { expr: String, why: String },
    #[error("time_zone {0:?} is not an IANA time zone name (e.g. Europe/Berlin, UTC)")]
    TimeZone(String),
    #[error("time_zone is for cron; every_ms counts fixed milliseconds from start_at")]
    ZoneWithEvery,
    #[error(
        "every_ms must be at least {EVERY_MIN_MS} and at most {EVERY_MAX_MS} (a hundred years)"
    )]
    EveryOutOfRange,
    #[error("cron {0:?} never fires")]
    Never(String),
}

/// When a schedule's occurrences fall.
#[derive(Debug, Clone)]
pub enum Timing {
    /// A cron expression read on the wall clock of `zone`.
    Cron { cron: Box<Cron>, zone: Zone },
    /// Every `every_ms` milliseconds from `anchor`.
    Every {
        every_ms: u64,
        anchor: DateTime<Utc>,
    },
}

/// The cron expression, parsed: 5 fields, or 6 with seconds first. The
/// `@daily`-style nicknames are accepted too.
pub fn cron_parse(expr: &str) -> Result<Cron, InvalidTiming> {
    let invalid = |why: String| InvalidTiming::Cron {
        expr: expr.to_owned(),
        why,
    };
    let trimmed = expr.trim();
    if trimmed.chars().count() > CRON_MAX_CHARS {
        return Err(invalid(format!("it is over {CRON_MAX_CHARS} characters")));
    }
    let fields = trimmed.split_whitespace().count();
    if !trimmed.starts_with('@') && !(5..=6).contains(&fields) {
        return Err(invalid(format!("it has {fields} fields")));
    }
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(trimmed)
        .map_err(|err| invalid(err.to_string()))
}

/// The zone named `name` in the rules this process has loaded.
pub fn zone_parse(name: &str) -> Result<Zone, InvalidTiming> {
    zones::current()
        .zone(name)
        .ok_or_else(|| InvalidTiming::TimeZone(name.to_owned()))
}

impl Timing {
    /// From the columns of a schedule (or a request): `cron` with an
    /// optional `time_zone` (UTC when absent), or `every_ms` from `anchor`.
    pub fn from_parts(
        cron: Option<&str>,
        time_zone: Option<&str>,
        every_ms: Option<u64>,
        anchor: DateTime<Utc>,
    ) -> Result<Timing, InvalidTiming> {
        match (cron, every_ms) {
            (Some(_), Some(_)) => Err(InvalidTiming::Both),
            (None, None) => Err(InvalidTiming::Neither),
            (Some(expr), None) => Ok(Timing::Cron {
                cron: Box::new(cron_parse(expr)?),
                zone: zone_parse(time_zone.unwrap_or("UTC"))?,
            }),
            (None, Some(every_ms)) => {
                if time_zone.is_some() {
                    return Err(InvalidTiming::ZoneWithEvery);
                }
                if !(EVERY_MIN_MS..=EVERY_MAX_MS).contains(&every_ms) {
                    return Err(InvalidTiming::EveryOutOfRange);
                }
                Ok(Timing::Every { every_ms, anchor })
            }
        }
    }

    /// The first occurrence strictly after `after`, or None when there is
    /// none (a cron expression that matches no date, or nothing before the
    /// end of 9999, the last time the database stores).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.next_after_unbounded(after)
            .filter(|at| crate::domain::job::time_in_range(*at))
    }

    fn next_after_unbounded(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Timing::Every { every_ms, anchor } => {
                if after < *anchor {
                    return Some(*anchor);
                }
                let every = i64::try_from(*every_ms).ok()?;
                let periods = (after - *anchor).num_milliseconds() / every + 1;
                anchor.checked_add_signed(Duration::try_milliseconds(periods.checked_mul(every)?)?)
            }
            Timing::Cron { cron, zone } => {
                let mut local = after.with_timezone(zone).naive_local();
                for _ in 0..SEARCH_MAX {
                    local = cron.find_next_occurrence(&local, false).ok()?;
                    let at = match zone.from_local_datetime(&local) {
                        LocalResult::Single(at) => at.with_timezone(&Utc),
                        // The first of the two, unless that one is already
                        // behind us (we are inside the repeated hour).
                        LocalResult::Ambiguous(first, second) => {
                            let first = first.with_timezone(&Utc);
                            if first > after {
                                first
                            } else {
                                second.with_timezone(&Utc)
                            }
                        }
                        LocalResult::None => zones::gap_end(zone, local),
                    };
                    if at > after {
                        return Some(at);
                    }
                }
                None
            }
        }
    }

    /// The wall-clock time of an occurrence at `at`, to keep beside it so
    /// that a newer tzdata moves it: the local time it falls on in a cron
    /// schedule's zone. None for intervals and for UTC, which no tzdata
    /// release changes.
    pub fn wall_clock(&self, at: DateTime<Utc>) -> Option<WallClock> {
        match self {
            Timing::Cron { zone, .. } if zone.name() != "UTC" => Some(WallClock {
                local: at.with_timezone(zone).naive_local(),
                zone: zone.name().to_owned(),
                tzdata_version: zones::current().version().to_owned(),
            }),
            _ => None,
        }
    }

    /// The occurrences strictly after `after`, at most `count`.
    pub fn preview(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let mut out = Vec::with_capacity(count);
        let mut cursor = after;
        while out.len() < count {
            match self.next_after(cursor) {
                Some(next) => {
                    out.push(next);
                    cursor = next;
                }
                None => break,
            }
        }
        out
    }
}

/// What to do with occurrences whose time passed while no tickler created
/// them (tickler was down, or the schedule could not be read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    /// None of them: the schedule goes on with its next occurrence.
    Skip,
    /// One, now, for the latest missed one.
    FireOnce,
    /// Each missed one, in order, as soon as possible.
    FireAll,
}

impl Misfire {
    pub fn as_str(self) -> &'static str {
        match self {
            Misfire::Skip => "skip",
            Misfire::FireOnce => "fire_once",
            Misfire::FireAll => "fire_all",
        }
    }
}

impl fmt::Display for Misfire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Misfire {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "skip" => Ok(Misfire::Skip),
            "fire_once" => Ok(Misfire::FireOnce),
            "fire_all" => Ok(Misfire::FireAll),
            other => Err(format!(
                "misfire {other:?} is not one of skip, fire_once, fire_all"
            )),
        }
    }
}

/// Where a schedule stands, as the materializer reads it.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Every occurrence at or before this is decided.
    pub cursor: DateTime<Utc>,
    /// Occurrences created so far.
    pub occurrences: u32,
    /// Whether the latest created occurrence fires late (still waiting, or
    /// produced after its grace): under `fire_once`, it is the one firing
    /// for the misfire.
    pub latest_pending: bool,
}

/// The limits of a schedule.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub end_at: Option<DateTime<Utc>>,
    pub max_occurrences: Option<u32>,
    pub misfire: Misfire,
    /// How late an occurrence may be created and still count as on time.
    pub misfire_grace: Duration,
    /// Most occurrences one pass creates ([`create_max_per_pass`]).
    pub create_max: usize,
}

/// One occurrence to create as a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence {
    /// The occurrence's instant: part of its job's key.
    pub at: DateTime<Utc>,
    /// When its job runs: `at`, or now for a `fire_once` misfire.
    pub run_at: DateTime<Utc>,
    /// A `skip` occurrence still pending at this time is cancelled rather
    /// than produced late.
    pub expires_at: Option<DateTime<Utc>>,
}

/// What one pass over a schedule decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub create: Vec<Occurrence>,
    /// Occurrences missed and not created (their policy skipped them).
    pub skipped: u64,
    /// The first and the last instant of the missed occurrences, both
    /// inclusive, when the policy skipped some: what an audit shows as
    /// `skipped` (the one `fire_once` creates lies inside, as a job).
    pub skipped_span: Option<(DateTime<Utc>, DateTime<Utc>)>,
    pub cursor: DateTime<Utc>,
    /// The next occurrence after the cursor, None when the schedule ended.
    pub next_at: Option<DateTime<Utc>>,
    pub ended: bool,
}

/// Decides which occurrences to create at database time `now`: every
/// occurrence up to `now + lookahead` and one beyond, so that the next
/// occurrence always exists as a job (seen, moved or cancelled like any
/// other). Occurrences more than the grace behind `now` are misfires, and
/// the schedule's policy decides about them.
///
/// Long because it is one walk over the occurrences with the misfire
/// policy applied as it goes; the policy's three cases are commented.
pub fn plan(
    timing: &Timing,
    bounds: &Bounds,
    progress: Progress,
    now: DateTime<Utc>,
    lookahead: Duration,
) -> Plan {
    let horizon = now + lookahead;
    let missed_before = now - bounds.misfire_grace;
    let mut plan = Plan {
        create: Vec::new(),
        skipped: 0,
        skipped_span: None,
        cursor: progress.cursor,
        next_at: None,
        ended: false,
    };
    let mut latest_missed = None;
    let mut walked = 0usize;
    let reached_max = |plan: &Plan| {
        bounds.max_occurrences.is_some_and(|max| {
            u64::from(progress.occurrences) + plan.create.len() as u64 >= u64::from(max)
        })
    };
    loop {
        if reached_max(&plan) {
            plan.ended = true;
            break;
        }
        if plan.create.len() >= bounds.create_max {
            break;
        }
        let Some(next) = timing
            .next_after(plan.cursor)
            .filter(|next| bounds.end_at.is_none_or(|end| *next <= end))
        else {
            plan.ended = true;
            break;
        };
        if next < missed_before {
            walked += 1;
            match bounds.misfire {
                Misfire::FireAll => plan.create.push(Occurrence {
                    at: next,
                    run_at: next,
                    expires_at: None,
                }),
                Misfire::FireOnce => {
                    plan.skipped += u64::from(latest_missed.is_some());
                    latest_missed = Some(next);
                }
                Misfire::Skip => plan.skipped += 1,
            }
            plan.cursor = next;
            if walked >= MISSED_WALK_MAX && bounds.misfire != Misfire::FireAll {
                // Years of missed seconds: jump to the present.
                plan.cursor = plan.cursor.max(missed_before - Duration::milliseconds(1));
            }
            if bounds.misfire != Misfire::FireAll {
                let first = plan.skipped_span.map_or(next, |(first, _)| first);
                plan.skipped_span = Some((first, plan.cursor));
            }
            continue;
        }
        if let Some(missed) = latest_missed.take() {
            once(&mut plan, missed, progress.latest_pending, now);
            if reached_max(&plan) {
                plan.ended = true;
                break;
            }
        }
        plan.create.push(Occurrence {
            at: next,
            run_at: next,
            expires_at: (bounds.misfire == Misfire::Skip)
                .then(|| next.checked_add_signed(bounds.misfire_grace))
                .flatten()
                .filter(|at| crate::domain::job::time_in_range(*at)),
        });
        plan.cursor = next;
        if next > horizon {
            break;
        }
    }
    if let Some(missed) = latest_missed.take() {
        once(&mut plan, missed, progress.latest_pending, now);
    }
    if plan.skipped == 0 {
        // A lone fire_once misfire, created: nothing was passed over.
        plan.skipped_span = None;
    }
    if !plan.ended {
        plan.next_at = timing
            .next_after(plan.cursor)
            .filter(|next| bounds.end_at.is_none_or(|end| *next <= end));
        plan.ended = plan.next_at.is_none() || reached_max(&plan);
        if plan.ended {
            plan.next_at = None;
        }
    }
    plan
}

/// The one firing of a `fire_once` misfire, unless the occurrence created
/// before the outage is still pending: that one, produced late, is it.
fn once(plan: &mut Plan, missed: DateTime<Utc>, latest_pending: bool, now: DateTime<Utc>) {
    if latest_pending && plan.create.is_empty() {
        plan.skipped += 1;
        return;
    }
    plan.create.push(Occurrence {
        at: missed,
        run_at: now,
        expires_at: None,
    });
}

/// The key of an occurrence's job: the schedule's key and the occurrence's
/// instant. Two instances creating the same occurrence write the same
/// (topic, key), which the database takes once.
pub fn occurrence_key(schedule_key: &str, at: DateTime<Utc>) -> String {
    format!(
        "{schedule_key}@{}",
        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
}

/// The instant of an occurrence's job key, as [`occurrence_key`] wrote
/// it; None for a key of another shape.
pub fn occurrence_instant(key: &str) -> Option<DateTime<Utc>> {
    let (_, instant) = key.rsplit_once('@')?;
    DateTime::parse_from_rfc3339(instant)
        .ok()
        .map(|at| at.with_timezone(&Utc))
}

/// Longest schedule key: room for `@` and the instant in 255 characters.
pub const SCHEDULE_KEY_MAX_CHARS: usize = 255 - 25;

/// The occurrences a schedule has yet to create, as a forecast counts
/// them.
#[derive(Debug, Clone, Copy)]
pub struct Projected<'a> {
    pub timing: &'a Timing,
    /// Every occurrence at or before this exists as a job, or was decided.
    pub cursor: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
    /// How many more it may create (`max_occurrences` less those created);
    /// None: no limit.
    pub remaining: Option<u64>,
}

/// Buckets of `bucket_ms` from `from` up to `to`, each counting what falls
/// in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub bucket_ms: u64,
    pub counts: Vec<u64>,
}

impl Buckets {
    /// Empty buckets covering [`from`, `to`); the last may end past `to`.
    pub fn new(from: DateTime<Utc>, to: DateTime<Utc>, bucket_ms: u64) -> Buckets {
        let span = (to - from).num_milliseconds().max(0) as u64;
        let n = span.div_ceil(bucket_ms.max(1));
        Buckets {
            from,
            to,
            bucket_ms: bucket_ms.max(1),
            counts: vec![0; n as usize],
        }
    }

    fn index_of(&self, at: DateTime<Utc>) -> Option<usize> {
        if at < self.from || at >= self.to {
            return None;
        }
        let index = (at - self.from).num_milliseconds() as u64 / self.bucket_ms;
        Some(index as usize).filter(|i| *i < self.counts.len())
    }

    /// The instant bucket `index` starts.
    pub fn start_of(&self, index: usize) -> DateTime<Utc> {
        self.from + Duration::milliseconds((index as u64 * self.bucket_ms) as i64)
    }
}

/// Counts into `buckets` the occurrences `schedule` has yet to create in
/// their range. An `every_ms` schedule is counted by arithmetic, whatever
/// the range; a cron one by walking its occurrences, at most `walk_max`
/// of them. Returns how many it counted and whether the walk stopped
/// short of the range's end.
pub fn project(schedule: Projected<'_>, buckets: &mut Buckets, walk_max: usize) -> (u64, bool) {
    let to = match schedule.end_at {
        // Occurrences at or before end_at: the range's end is just after it.
        Some(end) => buckets.to.min(end + Duration::milliseconds(1)),
        None => buckets.to,
    };
    if to <= buckets.from {
        return (0, false);
    }
    match schedule.timing {
        Timing::Every { every_ms, anchor } => (
            project_every(*every_ms, *anchor, schedule, to, buckets),
            false,
        ),
        Timing::Cron { .. } => {
            let mut counted = 0u64;
            let mut at = schedule
                .cursor
                .max(buckets.from - Duration::milliseconds(1));
            for _ in 0..walk_max {
                if schedule.remaining.is_some_and(|left| counted >= left) {
                    return (counted, false);
                }
                let Some(next) = schedule.timing.next_after(at).filter(|next| *next < to) else {
                    return (counted, false);
                };
                if let Some(index) = buckets.index_of(next) {
                    buckets.counts[index] += 1;
                    counted += 1;
                }
                at = next;
            }
            (counted, true)
        }
    }
}

/// The occurrences `anchor + k × every_ms` after the cursor, before `to`,
/// at most `remaining` of them, counted bucket by bucket.
fn project_every(
    every_ms: u64,
    anchor: DateTime<Utc>,
    schedule: Projected<'_>,
    to: DateTime<Utc>,
    buckets: &mut Buckets,
) -> u64 {
    let every = every_ms.max(1) as i64;
    let ms = |at: DateTime<Utc>| (at - anchor).num_milliseconds();
    // The first k whose instant is at or after `at`.
    let first_at_or_after = |offset: i64| -> i64 {
        if offset <= 0 {
            0
        } else {
            (offset + every - 1) / every
        }
    };
    // After the cursor: strictly later.
    let k_first = first_at_or_after(ms(schedule.cursor) + 1);
    let k_end = match schedule.remaining {
        Some(left) => k_first.saturating_add(i64::try_from(left).unwrap_or(i64::MAX)),
        None => i64::MAX,
    }
    .min(first_at_or_after(ms(to)));
    let mut counted = 0;
    for index in 0..buckets.counts.len() {
        let start = buckets.start_of(index);
        let end = (start + Duration::milliseconds(buckets.bucket_ms as i64)).min(buckets.to);
        let lo = first_at_or_after(ms(start)).max(k_first);
        let hi = first_at_or_after(ms(end)).min(k_end);
        if hi > lo {
            buckets.counts[index] += (hi - lo) as u64;
            counted += (hi - lo) as u64;
        }
    }
    counted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn cron(expr: &str, zone: &str) -> Timing {
        Timing::from_parts(Some(expr), Some(zone), None, utc("2000-01-01T00:00:00Z")).unwrap()
    }

    /// The occurrences after `from`, in RFC 3339 with the zone's offset.
    fn local_times(timing: &Timing, from: &str, count: usize) -> Vec<String> {
        let Timing::Cron { zone, .. } = timing else {
            unreachable!()
        };
        timing
            .preview(utc(from), count)
            .iter()
            .map(|at| at.with_timezone(zone).to_rfc3339())
            .collect()
    }

    #[test]
    fn a_skipped_local_time_fires_once_at_the_change() {
        // Europe/Berlin springs forward 2027-03-28 02:00 CET -> 03:00 CEST.
        let daily = cron("30 2 * * *", "Europe/Berlin");
        assert_eq!(
            local_times(&daily, "2027-03-26T12:00:00Z", 3),
            [
                "2027-03-27T02:30:00+01:00",
                "2027-03-28T03:00:00+02:00",
                "2027-03-29T02:30:00+02:00"
            ]
        );
        // Every 15 minutes: the four skipped quarter hours fold into one
        // firing at 03:00, which is also 03:00's own.
        let quarterly = cron("*/15 * * * *", "Europe/Berlin");
        assert_eq!(
            local_times(&quarterly, "2027-03-28T00:40:00Z", 4),
            [
                "2027-03-28T01:45:00+01:00",
                "2027-03-28T03:00:00+02:00",
                "2027-03-28T03:15:00+02:00",
                "2027-03-28T03:30:00+02:00"
            ]
        );
        // 2028: the last Sunday of March is the 26th.
        assert_eq!(
            local_times(&daily, "2028-03-25T12:00:00Z", 2),
            ["2028-03-26T03:00:00+02:00", "2028-03-27T02:30:00+02:00"]
        );
    }

    #[test]
    fn a_repeated_local_time_fires_once_at_its_first_occurrence() {
        // Europe/Berlin falls back 2027-10-31 03:00 CEST -> 02:00 CET.
        let daily = cron("30 2 * * *", "Europe/Berlin");
        assert_eq!(
            local_times(&daily, "2027-10-30T12:00:00Z", 3),
            [
                "2027-10-31T02:30:00+02:00",
                "2027-11-01T02:30:00+01:00",
                "2027-11-02T02:30:00+01:00"
            ]
        );
        // Every 30 minutes: the repeated hour is not fired again.
        let half_hourly = cron("*/30 * * * *", "Europe/Berlin");
        assert_eq!(
            local_times(&half_hourly, "2027-10-30T23:10:00Z", 5),
            [
                "2027-10-31T01:30:00+02:00",
                "2027-10-31T02:00:00+02:00",
                "2027-10-31T02:30:00+02:00",
                "2027-10-31T03:00:00+01:00",
                "2027-10-31T03:30:00+01:00"
            ]
        );
        // 2028: the last Sunday of October is the 29th.
        assert_eq!(
            local_times(&daily, "2028-10-28T12:00:00Z", 2),
            ["2028-10-29T02:30:00+02:00", "2028-10-30T02:30:00+01:00"]
        );
    }

    #[test]
    fn a_schedule_started_inside_the_repeated_hour_fires_after_its_start() {
        // 02:10 CET, the second pass of the hour: 02:15's first occurrence
        // (CEST) is behind, its second one is next.
        let quarterly = cron("*/15 * * * *", "Europe/Berlin");
        assert_eq!(
            local_times(&quarterly, "2027-10-31T01:10:00Z", 2),
            ["2027-10-31T02:15:00+01:00", "2027-10-31T02:30:00+01:00"]
        );
    }

    #[test]
    fn new_york_changes_at_two_in_the_morning() {
        let daily = cron("30 2 * * *", "America/New_York");
        // 2027-03-14: 02:00 EST -> 03:00 EDT; 2027-11-07: 02:00 EDT -> 01:00 EST.
        assert_eq!(
            local_times(&daily, "2027-03-13T12:00:00Z", 2),
            ["2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"]
        );
        let early = cron("30 1 * * *", "America/New_York");
        assert_eq!(
            local_times(&early, "2027-11-06T12:00:00Z", 2),
            ["2027-11-07T01:30:00-04:00", "2027-11-08T01:30:00-05:00"]
        );
        // 2028-03-12 and 2028-11-05.
        assert_eq!(
            local_times(&daily, "2028-03-11T12:00:00Z", 1),
            ["2028-03-12T03:00:00-04:00"]
        );
        assert_eq!(
            local_times(&early, "2028-11-04T12:00:00Z", 2),
            ["2028-11-05T01:30:00-04:00", "2028-11-06T01:30:00-05:00"]
        );
    }

    #[test]
    fn sydney_changes_the_other_way_round() {
        // Southern hemisphere: 2027-04-04 03:00 AEDT -> 02:00 AEST (fall
        // back); 2027-10-03 02:00 AEST -> 03:00 AEDT (spring forward).
        let daily = cron("30 2 * * *", "Australia/Sydney");
        assert_eq!(
            local_times(&daily, "2027-04-02T12:00:00Z", 3),
            [
                "2027-04-03T02:30:00+11:00",
                "2027-04-04T02:30:00+11:00",
                "2027-04-05T02:30:00+10:00"
            ]
        );
        assert_eq!(
            local_times(&daily, "2027-10-01T12:00:00Z", 3),
            [
                "2027-10-02T02:30:00+10:00",
                "2027-10-03T03:00:00+11:00",
                "2027-10-04T02:30:00+11:00"
            ]
        );
        // 2028: 2 April and 1 October.
        assert_eq!(
            local_times(&daily, "2028-04-01T12:00:00Z", 2),
            ["2028-04-02T02:30:00+11:00", "2028-04-03T02:30:00+10:00"]
        );
        assert_eq!(
            local_times(&daily, "2028-09-30T12:00:00Z", 2),
            ["2028-10-01T03:00:00+11:00", "2028-10-02T02:30:00+11:00"]
        );
    }

    #[test]
    fn month_ends_and_leap_days() {
        // The last day of every month, 09:00 in Berlin.
        let month_end = cron("0 9 L * *", "Europe/Berlin");
        assert_eq!(
            local_times(&month_end, "2028-01-15T00:00:00Z", 4),
            [
                "2028-01-31T09:00:00+01:00",
                "2028-02-29T09:00:00+01:00",
                "2028-03-31T09:00:00+02:00",
                "2028-04-30T09:00:00+02:00"
            ]
        );
        // The 31st skips the months without one.
        let the_31st = cron("0 0 31 * *", "UTC");
        assert_eq!(
            local_times(&the_31st, "2027-01-31T00:00:00Z", 3),
            [
                "2027-03-31T00:00:00+00:00",
                "2027-05-31T00:00:00+00:00",
                "2027-07-31T00:00:00+00:00"
            ]
        );
        // 29 February: once every leap year.
        let leap = cron("0 12 29 2 *", "America/New_York");
        assert_eq!(
            local_times(&leap, "2026-06-01T00:00:00Z", 2),
            ["2028-02-29T12:00:00-05:00", "2032-02-29T12:00:00-05:00"]
        );
    }

    #[test]
    fn six_fields_have_seconds_first() {
        let every_ten = cron("*/10 * * * * *", "UTC");
        assert_eq!(
            local_times(&every_ten, "2027-01-01T00:00:05Z", 2),
            ["2027-01-01T00:00:10+00:00", "2027-01-01T00:00:20+00:00"]
        );
    }

    #[test]
    fn bad_timings_are_named() {
        let at = utc("2027-01-01T00:00:00Z");
        let parts = |cron, zone, every| Timing::from_parts(cron, zone, every, at).unwrap_err();
        assert!(matches!(
            parts(Some("* * *"), None, None),
            InvalidTiming::Cron { .. }
        ));
        assert!(matches!(
            parts(Some("0 0 1 1 * 2027 x"), None, None),
            InvalidTiming::Cron { .. }
        ));
        assert!(matches!(
            parts(Some("61 * * * *"), None, None),
            InvalidTiming::Cron { .. }
        ));
        assert_eq!(
            parts(Some("0 9 * * *"), Some("Mars/Olympus"), None),
            InvalidTiming::TimeZone("Mars/Olympus".to_owned())
        );
        assert_eq!(parts(None, None, Some(999)), InvalidTiming::EveryOutOfRange);
        assert_eq!(
            parts(None, None, Some(100_000_000_000_000_000)),
            InvalidTiming::EveryOutOfRange
        );
        let long = format!("0 {} * * *", vec!["1"; 200].join(","));
        assert!(matches!(
            parts(Some(&long), None, None),
            InvalidTiming::Cron { .. }
        ));
        assert_eq!(
            parts(None, Some("UTC"), Some(60_000)),
            InvalidTiming::ZoneWithEvery
        );
        assert_eq!(
            parts(Some("0 9 * * *"), None, Some(1000)),
            InvalidTiming::Both
        );
        assert_eq!(parts(None, None, None), InvalidTiming::Neither);
        let never = cron("0 0 30 2 *", "UTC");
        assert_eq!(never.next_after(at), None);
    }

    #[test]
    fn every_counts_from_its_anchor() {
        let anchor = utc("2027-01-01T00:00:00.500Z");
        let every = Timing::from_parts(None, None, Some(60_000), anchor).unwrap();
        assert_eq!(every.next_after(utc("2026-12-31T00:00:00Z")), Some(anchor));
        assert_eq!(
            every.next_after(anchor),
            Some(utc("2027-01-01T00:01:00.500Z"))
        );
        assert_eq!(
            every.next_after(utc("2027-01-01T00:01:00.499Z")),
            Some(utc("2027-01-01T00:01:00.500Z"))
        );
    }

    fn bounds(misfire: Misfire) -> Bounds {
        Bounds {
            end_at: None,
            max_occurrences: None,
            misfire,
            misfire_grace: Duration::seconds(1),
            create_max: CREATE_MAX_PER_PASS,
        }
    }

    fn every_minute() -> Timing {
        Timing::from_parts(None, None, Some(60_000), utc("2027-01-01T00:00:00Z")).unwrap()
    }

    fn progress(cursor: &str, latest_pending: bool) -> Progress {
        Progress {
            cursor: utc(cursor),
            occurrences: 1,
            latest_pending,
        }
    }

    #[test]
    fn a_running_schedule_holds_its_next_occurrence() {
        let plan = plan(
            &every_minute(),
            &bounds(Misfire::FireOnce),
            progress("2027-01-01T00:01:00Z", true),
            utc("2027-01-01T00:01:30Z"),
            Duration::zero(),
        );
        assert_eq!(plan.create.len(), 1);
        assert_eq!(plan.create[0].at, utc("2027-01-01T00:02:00Z"));
        assert_eq!(plan.next_at, Some(utc("2027-01-01T00:03:00Z")));
        assert_eq!(plan.skipped, 0);
        // The lookahead brings more: up to it, and one beyond.
        let ahead = super::plan(
            &every_minute(),
            &bounds(Misfire::FireOnce),
            progress("2027-01-01T00:01:00Z", true),
            utc("2027-01-01T00:01:30Z"),
            Duration::seconds(150),
        );
        let at: Vec<_> = ahead.create.iter().map(|o| o.at).collect();
        assert_eq!(
            at,
            [
                utc("2027-01-01T00:02:00Z"),
                utc("2027-01-01T00:03:00Z"),
                utc("2027-01-01T00:04:00Z"),
                utc("2027-01-01T00:05:00Z")
            ]
        );
    }

    #[test]
    fn a_pass_of_big_payloads_creates_fewer_and_the_next_goes_on() {
        assert_eq!(super::create_max_per_pass(0), CREATE_MAX_PER_PASS);
        assert_eq!(super::create_max_per_pass(200), CREATE_MAX_PER_PASS);
        assert_eq!(super::create_max_per_pass(1 << 20), 32);
        assert_eq!(super::create_max_per_pass(16 << 20), 2);
        assert_eq!(super::create_max_per_pass(64 << 20), 1);
        let small = Bounds {
            create_max: 2,
            ..bounds(Misfire::FireOnce)
        };
        let first = plan(
            &every_minute(),
            &small,
            progress("2027-01-01T00:01:00Z", true),
            utc("2027-01-01T00:01:30Z"),
            Duration::seconds(300),
        );
        let at: Vec<_> = first.create.iter().map(|o| o.at).collect();
        assert_eq!(
            at,
            [utc("2027-01-01T00:02:00Z"), utc("2027-01-01T00:03:00Z")]
        );
        let second = plan(
            &every_minute(),
            &small,
            progress(&first.cursor.to_rfc3339(), true),
            utc("2027-01-01T00:01:30Z"),
            Duration::seconds(300),
        );
        assert_eq!(second.create[0].at, utc("2027-01-01T00:04:00Z"));
    }

    /// Down from 00:01:30 to 00:04:30: 00:02 was created before the outage
    /// (and is still pending); 00:03 and 00:04 were missed.
    fn after_outage(misfire: Misfire, latest_pending: bool) -> Plan {
        plan(
            &every_minute(),
            &bounds(misfire),
            progress("2027-01-01T00:02:00Z", latest_pending),
            utc("2027-01-01T00:04:30Z"),
            Duration::zero(),
        )
    }

    #[test]
    fn an_occurrence_key_gives_its_instant_back() {
        let at = utc("2027-03-01T08:00:00.250Z");
        assert_eq!(
            occurrence_instant(&occurrence_key("renewal-42", at)),
            Some(at)
        );
        assert_eq!(occurrence_instant("no-instant"), None);
        assert_eq!(occurrence_instant("k@yesterday"), None);
    }

    #[test]
    fn skip_creates_none_of_the_missed() {
        let plan = after_outage(Misfire::Skip, true);
        assert_eq!(plan.skipped, 2);
        assert_eq!(
            plan.skipped_span,
            Some((utc("2027-01-01T00:03:00Z"), utc("2027-01-01T00:04:00Z")))
        );
        assert_eq!(plan.create.len(), 1);
        assert_eq!(plan.create[0].at, utc("2027-01-01T00:05:00Z"));
        assert_eq!(
            plan.create[0].expires_at,
            Some(utc("2027-01-01T00:05:01Z")),
            "a skip occurrence expires after the grace"
        );
    }

    #[test]
    fn fire_once_creates_one_now_unless_the_last_one_is_still_waiting() {
        let plan = after_outage(Misfire::FireOnce, false);
        let created: Vec<_> = plan.create.iter().map(|o| (o.at, o.run_at)).collect();
        assert_eq!(
            created,
            [
                (utc("2027-01-01T00:04:00Z"), utc("2027-01-01T00:04:30Z")),
                (utc("2027-01-01T00:05:00Z"), utc("2027-01-01T00:05:00Z"))
            ]
        );
        assert_eq!(plan.skipped, 1);
        assert_eq!(
            plan.skipped_span,
            Some((utc("2027-01-01T00:03:00Z"), utc("2027-01-01T00:04:00Z"))),
            "the span holds the one created, which its job tells"
        );
        // 00:02's job has not been produced yet: it fires late, and is the
        // one firing.
        let plan = after_outage(Misfire::FireOnce, true);
        assert_eq!(plan.create.len(), 1);
        assert_eq!(plan.create[0].at, utc("2027-01-01T00:05:00Z"));
        assert_eq!(plan.skipped, 2);
    }

    #[test]
    fn fire_all_creates_each_missed_in_order() {
        let plan = after_outage(Misfire::FireAll, true);
        let created: Vec<_> = plan.create.iter().map(|o| (o.at, o.run_at)).collect();
        assert_eq!(
            created,
            [
                (utc("2027-01-01T00:03:00Z"), utc("2027-01-01T00:03:00Z")),
                (utc("2027-01-01T00:04:00Z"), utc("2027-01-01T00:04:00Z")),
                (utc("2027-01-01T00:05:00Z"), utc("2027-01-01T00:05:00Z"))
            ]
        );
        assert!(plan.create.iter().all(|o| o.expires_at.is_none()));
        assert_eq!(plan.skipped_span, None);
    }

    #[test]
    fn a_schedule_ends_at_its_bounds() {
        let mut limited = bounds(Misfire::FireOnce);
        limited.max_occurrences = Some(2);
        let plan = plan(
            &every_minute(),
            &limited,
            progress("2027-01-01T00:01:00Z", true),
            utc("2027-01-01T00:01:30Z"),
            Duration::zero(),
        );
        assert_eq!(plan.create.len(), 1);
        assert!(plan.ended);
        assert_eq!(plan.next_at, None);

        let mut until = bounds(Misfire::FireOnce);
        until.end_at = Some(utc("2027-01-01T00:03:00Z"));
        let plan = super::plan(
            &every_minute(),
            &until,
            progress("2027-01-01T00:01:00Z", true),
            utc("2027-01-01T00:01:30Z"),
            Duration::seconds(150),
        );
        let at: Vec<_> = plan.create.iter().map(|o| o.at).collect();
        assert_eq!(
            at,
            [utc("2027-01-01T00:02:00Z"), utc("2027-01-01T00:03:00Z")],
            "end_at is inclusive"
        );
        assert!(plan.ended);
    }

    #[test]
    fn a_long_outage_is_not_walked_second_by_second() {
        let every_second =
            Timing::from_parts(None, None, Some(1_000), utc("2000-01-01T00:00:00Z")).unwrap();
        let plan = plan(
            &every_second,
            &bounds(Misfire::Skip),
            progress("2000-01-01T00:00:00Z", false),
            utc("2027-01-01T00:00:00Z"),
            Duration::zero(),
        );
        let at: Vec<_> = plan.create.iter().map(|o| o.at).collect();
        assert_eq!(
            at,
            [
                utc("2026-12-31T23:59:59Z"),
                utc("2027-01-01T00:00:00Z"),
                utc("2027-01-01T00:00:01Z")
            ],
            "within the grace, now, and the next"
        );
    }

    #[test]
    fn nothing_falls_after_the_last_storable_time() {
        let century =
            Timing::from_parts(None, None, Some(EVERY_MAX_MS), utc("9950-01-01T00:00:00Z"))
                .unwrap();
        assert_eq!(
            century.next_after(utc("9951-01-01T00:00:00Z")),
            None,
            "past 9999-12-31: the schedule ends"
        );
        let plan = plan(
            &century,
            &bounds(Misfire::Skip),
            progress("9951-01-01T00:00:00Z", false),
            utc("9960-01-01T00:00:00Z"),
            Duration::zero(),
        );
        assert!(plan.ended && plan.create.is_empty(), "{plan:?}");
    }

    #[test]
    fn occurrence_keys_name_the_instant() {
        assert_eq!(
            occurrence_key("renewal-42", utc("2027-03-28T01:00:00Z")),
            "renewal-42@2027-03-28T01:00:00.000Z"
        );
    }

    /// Counts by walking every occurrence, as a cron schedule is counted.
    fn walked(schedule: Projected<'_>, buckets: &mut Buckets) {
        let to = schedule.end_at.map_or(buckets.to, |end| {
            buckets.to.min(end + Duration::milliseconds(1))
        });
        let mut at = schedule
            .cursor
            .max(buckets.from - Duration::milliseconds(1));
        let mut counted = 0;
        while let Some(next) = schedule.timing.next_after(at).filter(|n| *n < to) {
            if schedule.remaining.is_some_and(|left| counted >= left) {
                break;
            }
            if next >= buckets.from {
                let index = (next - buckets.from).num_milliseconds() as u64 / buckets.bucket_ms;
                buckets.counts[index as usize] += 1;
                counted += 1;
            }
            at = next;
        }
    }

    #[test]
    fn an_every_schedule_is_counted_by_arithmetic_as_a_walk_would() {
        let anchor = utc("2027-01-01T00:00:07Z");
        let timing = Timing::Every {
            every_ms: 7_000,
            anchor,
        };
        for (cursor, end_at, remaining) in [
            (utc("2026-12-31T00:00:00Z"), None, None),
            (utc("2027-01-01T00:10:00Z"), None, None),
            (
                utc("2027-01-01T00:10:00Z"),
                Some(utc("2027-01-01T02:00:00Z")),
                None,
            ),
            (utc("2027-01-01T00:10:00Z"), None, Some(1000)),
            (
                utc("2027-01-01T00:00:14Z"),
                Some(utc("2027-01-01T00:00:21Z")),
                Some(5),
            ),
        ] {
            let schedule = Projected {
                timing: &timing,
                cursor,
                end_at,
                remaining,
            };
            let mut counted = Buckets::new(
                utc("2027-01-01T00:00:00Z"),
                utc("2027-01-01T05:00:00Z"),
                900_000,
            );
            let mut expected = counted.clone();
            let (n, stopped) = project(schedule, &mut counted, 10);
            walked(schedule, &mut expected);
            assert!(!stopped);
            assert_eq!(counted, expected, "{cursor} {end_at:?} {remaining:?}");
            assert_eq!(n, expected.counts.iter().sum::<u64>());
        }
    }

    #[test]
    fn a_cron_schedule_is_walked_from_its_cursor_within_its_bounds() {
        let timing = Timing::from_parts(
            Some("0 * * * *"),
            Some("Europe/Paris"),
            None,
            utc("2027-01-01T00:00:00Z"),
        )
        .unwrap();
        let mut buckets = Buckets::new(
            utc("2027-01-01T00:00:00Z"),
            utc("2027-01-02T00:00:00Z"),
            6 * 3_600_000,
        );
        let (n, stopped) = project(
            Projected {
                timing: &timing,
                cursor: utc("2027-01-01T02:00:00Z"),
                end_at: Some(utc("2027-01-01T20:00:00Z")),
                remaining: None,
            },
            &mut buckets,
            1_000,
        );
        // 03:00 to 20:00 inclusive, on the hour.
        assert_eq!((n, stopped), (18, false));
        assert_eq!(buckets.counts, vec![3, 6, 6, 3]);
        let mut capped = Buckets::new(
            utc("2027-01-01T00:00:00Z"),
            utc("2027-01-02T00:00:00Z"),
            3_600_000,
        );
        let (n, stopped) = project(
            Projected {
                timing: &timing,
                cursor: utc("2026-12-31T00:00:00Z"),
                end_at: None,
                remaining: None,
            },
            &mut capped,
            5,
        );
        assert_eq!((n, stopped), (5, true), "the walk stops at its cap");
    }
}
