//! Topic controls: which topics are paused and how fast each may be
//! dispatched. MySQL's `topic_controls` is the truth (set through the API
//! or by hand); every instance keeps a copy, read again every second.
//!
//! A pause is enforced by the dispatcher's compare-and-set in MySQL, which
//! refuses the jobs of a paused topic. That check costs, so the claim makes
//! it only while this copy names a paused topic or is older than
//! `CONTROLS_FRESH` (2 s): every instance reads the table every second, and
//! a pause through the API answers only `PAUSE_SETTLE` (3 s) after it
//! commits, when no instance can still trust a copy that misses it. From
//! then on nothing of the topic is produced: the dispatcher asks this copy
//! again before each send, so a job claimed before the pause and still
//! held is withheld too. A pause by hand in SQL takes hold within 2 s.
//! The copy also serves pacing (the dispatcher asks the topic's shared pace
//! in Redis only for topics that have one) and noticing a resume (the
//! paused topic's jobs left the index; they go back in).
//!
//! And payload schemas: each topic's `payload_schema` is compiled once per
//! change of its text (kept from one read to the next while the text is
//! the same). Creates are checked against it, and the dispatcher checks
//! every job of a topic that has one again right before its send: a job
//! that no longer matches is held (`held_at`), not sent. A text that does
//! not compile (a hand edit) is logged once and costs only its topic: its
//! creates are refused and its due jobs held, never sent unchecked.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::config::{Config, TopicRules};
use crate::domain::grouping::{GroupBy, Grouping};
use crate::domain::job::PayloadKind;
use crate::domain::payload_schema::{PayloadSchema, SchemaMismatch};
use crate::index::{Index, IndexError};
use crate::metrics;
use crate::roles::service::Service;
use crate::store::{Store, StoreError};

/// A topic at its `max_in_flight` is counted again at most this often by
/// the dispatcher that holds its jobs back.
pub const IN_FLIGHT_RECOUNT: Duration = Duration::from_millis(100);
/// Most in-flight rows a topic with a `group_max_in_flight` reads to count
/// them by group; set `max_in_flight` below it so that the count is whole.
pub const IN_FLIGHT_GROUPS_READ: u32 = 100_000;
/// How often every instance reads the controls again.
pub const CONTROLS_REFRESH: Duration = Duration::from_secs(1);
/// A copy read longer ago than this is not trusted to say that no topic is
/// paused: the claim then checks pauses in MySQL itself.
pub const CONTROLS_FRESH: Duration = Duration::from_secs(2);
/// How long a pause waits after it commits before it answers: by then
/// every instance either read it or no longer trusts an older copy.
pub const PAUSE_SETTLE: Duration = Duration::from_millis(3_000);
/// A claim this young may be sent on a copy of the controls too old to be
/// trusted: it was decided after any pause that has answered by now, so it
/// saw it (`PAUSE_SETTLE` − `CONTROLS_FRESH`, with room to spare; counted
/// from before the compare-and-set was sent).
pub const CLAIM_TRUSTED: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
struct Snapshot {
    paused: HashSet<String>,
    /// Paces set through the API (or by hand), jobs per second.
    rates: HashMap<String, u32>,
    /// Groupings set through the API (or by hand): what by (as stored)
    /// and the groups' pace.
    groups: HashMap<String, (Option<String>, Option<u32>)>,
    /// Payload schemas, compiled (or why not), by topic.
    schemas: HashMap<String, TopicSchema>,
    /// When this copy was read (None: never).
    read_at: Option<Instant>,
}

/// A topic's payload schema as this copy holds it.
#[derive(Debug, Clone)]
pub enum TopicSchema {
    Compiled(Arc<PayloadSchema>),
    /// Stored text that does not compile (a hand edit): `text` as stored,
    /// `why` not.
    Broken {
        text: Arc<str>,
        why: String,
    },
}

impl TopicSchema {
    fn of_text(topic: &str, text: &str) -> TopicSchema {
        match PayloadSchema::compile(text) {
            Ok(schema) => TopicSchema::Compiled(Arc::new(schema)),
            Err(why) => {
                tracing::warn!(
                    topic,
                    problem = %why,
                    "topic_controls.payload_schema is not a JSON Schema; the topic's creates are refused and its due jobs held until it is fixed"
                );
                TopicSchema::Broken {
                    text: Arc::from(text),
                    why,
                }
            }
        }
    }

    fn text(&self) -> &str {
        match self {
            TopicSchema::Compiled(schema) => schema.text(),
            TopicSchema::Broken { text, .. } => text,
        }
    }

    /// Checks a payload: a broken schema matches nothing.
    pub fn check(&self, kind: PayloadKind, payload: &[u8]) -> Result<(), SchemaMismatch> {
        match self {
            TopicSchema::Compiled(schema) => schema.check(kind, payload),
            TopicSchema::Broken { why, .. } => {
                let message = format!(
                    "the topic's payload_schema does not compile ({why}): no payload can be checked"
                );
                Err(SchemaMismatch {
                    path: "/".to_owned(),
                    keyword: String::new(),
                    masked: message.clone(),
                    message,
                })
            }
        }
    }
}

/// This instance's copy of the topic controls, kept fresh by the
/// [`ControlsRefresher`]. Cheap to clone.
#[derive(Clone)]
pub struct TopicControls {
    snapshot: Arc<RwLock<Snapshot>>,
    store: Store,
    /// The paces of the configuration (`[topics."…"] max_per_second`).
    rules: Arc<TopicRules>,
    /// `[topics."…"] max_in_flight` and `group_max_in_flight`, by topic.
    in_flight_limits: Arc<HashMap<String, InFlightLimits>>,
    /// Each limited topic's last count and what this instance let go.
    in_flight: Arc<Mutex<HashMap<String, InFlight>>>,
}

/// A topic's limits on its jobs in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct InFlightLimits {
    /// `max_in_flight`: the topic's.
    topic: Option<u32>,
    /// `group_max_in_flight`: each group's.
    group: Option<u32>,
}

/// A count of a topic's jobs in flight: all, and by group when it has a
/// `group_max_in_flight`.
#[derive(Debug, Default)]
struct InFlightCount {
    all: u64,
    groups: HashMap<String, u64>,
}

/// A topic with a `max_in_flight` or a `group_max_in_flight`, as this
/// instance knows it.
#[derive(Debug)]
struct InFlight {
    /// Its jobs dispatching or dispatched at the last count.
    counted: u64,
    /// Those by group (a topic with a `group_max_in_flight`).
    groups: HashMap<String, u64>,
    /// When that count was asked for.
    counted_at: Instant,
    /// What this instance let go, and when: those let go after the count
    /// take room beside it. The dispatcher counts again between its passes
    /// ([`TopicControls::in_flight_recount`]), when every claim it let go
    /// before has committed and so shows in the count. By group (empty
    /// for a topic without a `group_max_in_flight`).
    grants: VecDeque<(Instant, String, u64)>,
}

impl InFlight {
    fn recounted(&mut self, count: InFlightCount, at: Instant) {
        if at <= self.counted_at {
            return;
        }
        self.counted = count.all;
        self.groups = count.groups;
        self.counted_at = at;
        while self
            .grants
            .front()
            .is_some_and(|(granted, _, _)| *granted < at)
        {
            self.grants.pop_front();
        }
    }

    /// Let go since the count.
    fn uncounted(&self) -> u64 {
        self.grants.iter().map(|(_, _, n)| n).sum()
    }

    /// Which of `groups` (a pass's due jobs, by group) go under `limits`
    /// at `share` of the room: see [`TopicControls::in_flight_admit`].
    fn admit(
        &mut self,
        limits: InFlightLimits,
        groups: &[&str],
        share: f64,
        now: Instant,
    ) -> Vec<bool> {
        let share = share.clamp(0.0, 1.0);
        let room = |limit: u32, counted: u64| {
            (u64::from(limit).saturating_sub(counted) as f64 * share).ceil() as u64
        };
        let mut topic_left = limits
            .topic
            .map(|limit| room(limit, self.counted).saturating_sub(self.uncounted()));
        let mut group_left: HashMap<&str, u64> = HashMap::new();
        let mut granted: HashMap<&str, u64> = HashMap::new();
        let mut admitted = Vec::with_capacity(groups.len());
        for group in groups {
            if topic_left == Some(0) {
                admitted.push(false);
                continue;
            }
            if let Some(limit) = limits.group {
                let left = group_left.entry(group).or_insert_with(|| {
                    let counted = self.groups.get(*group).copied().unwrap_or(0);
                    room(limit, counted).saturating_sub(self.uncounted_in(group))
                });
                if *left == 0 {
                    admitted.push(false);
                    continue;
                }
                *left -= 1;
            }
            if let Some(left) = topic_left.as_mut() {
                *left -= 1;
            }
            *granted.entry(group).or_default() += 1;
            admitted.push(true);
        }
        for (group, n) in granted {
            self.grants.push_back((now, group.to_owned(), n));
        }
        admitted
    }

    /// Of `group`, let go since the count.
    fn uncounted_in(&self, group: &str) -> u64 {
        self.grants
            .iter()
            .filter(|(_, of, _)| of == group)
            .map(|(_, _, n)| n)
            .sum()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl TopicControls {
    pub fn new(store: Store, config: &Config) -> TopicControls {
        TopicControls {
            snapshot: Arc::default(),
            store,
            rules: Arc::new(config.topic_rules()),
            in_flight: Arc::default(),
            in_flight_limits: Arc::new(
                config
                    .topic_rules()
                    .in_flight_limits()
                    .into_iter()
                    .map(|(topic, limit, group)| {
                        (
                            topic,
                            InFlightLimits {
                                topic: limit,
                                group,
                            },
                        )
                    })
                    .collect(),
            ),
        }
    }

    /// Whether any topic has a `max_in_flight` or a
    /// `group_max_in_flight` (else the dispatcher skips the check).
    pub fn any_in_flight_limited(&self) -> bool {
        !self.in_flight_limits.is_empty()
    }

    /// Whether `topic` has a `max_in_flight` or a `group_max_in_flight`.
    pub fn in_flight_limited(&self, topic: &str) -> bool {
        self.in_flight_limits.contains_key(topic)
    }

    pub fn in_flight_limit(&self, topic: &str) -> Option<u32> {
        self.in_flight_limits.get(topic).and_then(|l| l.topic)
    }

    /// `topic`'s `group_max_in_flight`, if it has one and its jobs are
    /// grouped.
    pub fn group_in_flight_limit(&self, topic: &str) -> Option<u32> {
        self.in_flight_limits.get(topic).and_then(|l| l.group)
    }

    fn in_flight_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlight>> {
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Which of a pass's due jobs of `topic` (given by their group, in
    /// order; the same empty name for a topic without a
    /// `group_max_in_flight`) this instance may let go now: within its
    /// `share` (the part of the shards it holds) of the room the topic's
    /// `max_in_flight` and each group's `group_max_in_flight` leave over
    /// the last count, less what it let go since (or too shortly before
    /// the count to show in it). The count is read every second, and again
    /// by a dispatcher held back; the instances' shares add up to the room
    /// left, so the fleet stays within each limit but for rounding (one
    /// job an instance). Without a count yet, nothing goes: the limit is
    /// kept from the first job.
    pub fn in_flight_admit(&self, topic: &str, groups: &[&str], share: f64) -> Vec<bool> {
        let Some(limits) = self.in_flight_limits.get(topic).copied() else {
            return vec![true; groups.len()];
        };
        let mut all = self.in_flight_lock();
        let Some(known) = all.get_mut(topic) else {
            return vec![false; groups.len()];
        };
        known.admit(limits, groups, share, Instant::now())
    }

    /// Counts `topics`' jobs in flight: all, and by group for a topic with
    /// a `group_max_in_flight` (reading at most [`IN_FLIGHT_GROUPS_READ`]
    /// of its rows, each placed in its group as the dispatcher places a
    /// due job).
    async fn in_flight_count(
        &self,
        topics: &[String],
    ) -> Result<HashMap<String, InFlightCount>, StoreError> {
        let counted = self.store.topic_in_flight(topics).await?;
        let mut counts = HashMap::new();
        for topic in topics {
            let mut count = InFlightCount {
                all: counted.get(topic).copied().unwrap_or(0),
                groups: HashMap::new(),
            };
            if let (Some(_), Some(grouping)) =
                (self.group_in_flight_limit(topic), self.grouping(topic))
            {
                let rows = self
                    .store
                    .topic_in_flight_pacing(
                        topic,
                        grouping.by == GroupBy::Token,
                        IN_FLIGHT_GROUPS_READ,
                    )
                    .await?;
                for row in rows {
                    let group = grouping
                        .by
                        .group_of(row.key.as_deref(), &row.headers, row.token);
                    *count.groups.entry(group).or_default() += 1;
                }
            }
            counts.insert(topic.clone(), count);
        }
        Ok(counts)
    }

    /// Records a count of the limited topics' jobs in flight, asked for at
    /// `at`: the first of each topic's (the controls' read), or the
    /// dispatcher's own (`recount`), made between its passes. A read of
    /// the controls does not count again: it runs beside the dispatcher,
    /// and could miss a claim not yet committed.
    fn in_flight_counted(
        &self,
        mut counted: HashMap<String, InFlightCount>,
        topics: &[String],
        at: Instant,
        recount: bool,
    ) {
        let mut all = self.in_flight_lock();
        for topic in topics {
            let count = counted.remove(topic).unwrap_or_default();
            match all.get_mut(topic) {
                Some(known) if recount => known.recounted(count, at),
                Some(_) => {}
                None => {
                    all.insert(
                        topic.clone(),
                        InFlight {
                            counted: count.all,
                            groups: count.groups,
                            counted_at: at,
                            grants: VecDeque::new(),
                        },
                    );
                }
            }
        }
    }

    /// Counts `topic`'s jobs in flight again when the last count is older
    /// than [`IN_FLIGHT_RECOUNT`], so that a topic at its limit gets room
    /// as soon as results come back. The dispatcher calls it before it
    /// admits a pass's jobs, when every claim it let go before has
    /// committed. Returns whether it counted.
    pub async fn in_flight_recount(&self, topic: &str) -> Result<bool, StoreError> {
        let stale = self
            .in_flight_lock()
            .get(topic)
            .is_some_and(|known| known.counted_at.elapsed() >= IN_FLIGHT_RECOUNT);
        if !stale {
            return Ok(false);
        }
        let counted_at = Instant::now();
        let topics = [topic.to_owned()];
        let counted = self.in_flight_count(&topics).await?;
        self.in_flight_counted(counted, &topics, counted_at, true);
        Ok(true)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pace of `topic`, jobs per second: the API's, else the
    /// configuration's, else none.
    pub fn rate(&self, topic: &str) -> Option<u32> {
        self.read()
            .rates
            .get(topic)
            .copied()
            .or_else(|| self.rules.max_per_second_for(topic))
            .filter(|rate| *rate > 0)
    }

    /// Whether any topic has a pace, of its own or its groups' (else the
    /// dispatcher skips pacing).
    pub fn any_paced(&self) -> bool {
        let snapshot = self.read();
        !snapshot.rates.is_empty()
            || snapshot.groups.values().any(|(_, rate)| rate.is_some())
            || self.rules.any_paced()
    }

    /// How `topic`'s jobs are grouped for fair dispatch, if they are: each
    /// of `group_by` and `group_max_per_second` the API's, else the
    /// configuration's. A `group_by` edited by hand into something that
    /// does not parse groups nothing (logged).
    pub fn grouping(&self, topic: &str) -> Option<Grouping> {
        let (api_by, api_rate) = self.read().groups.get(topic).cloned().unwrap_or_default();
        let (config_by, config_rate) = self.rules.grouping_for(topic);
        let by = api_by.or_else(|| config_by.map(str::to_owned))?;
        let by = match GroupBy::parse(&by) {
            Ok(by) => by,
            Err(problem) => {
                tracing::warn!(
                    topic,
                    problem,
                    "topic_controls.group_by does not parse; the topic's jobs are not grouped"
                );
                return None;
            }
        };
        Some(Grouping {
            by,
            per_second: api_rate.or(config_rate).filter(|rate| *rate > 0),
        })
    }

    /// Whether `topic`'s jobs are grouped by the token that created them:
    /// a create through a token then notes it (`token_jobs`).
    pub fn grouped_by_token(&self, topic: &str) -> bool {
        self.grouping(topic)
            .is_some_and(|grouping| grouping.by == GroupBy::Token)
    }

    /// Whether any topic is grouped by token (else the dispatcher's pacing
    /// does not read who created its jobs).
    pub fn any_grouped_by_token(&self) -> bool {
        let api = self
            .read()
            .groups
            .values()
            .any(|(by, _)| by.as_deref() == Some("token"));
        api || self.rules.any_grouped_by_token()
    }

    /// Whether any topic is grouped by a header (else the dispatcher's
    /// pacing neither reads nor opens the claimed jobs' headers).
    pub fn any_grouped_by_header(&self) -> bool {
        let api = self
            .read()
            .groups
            .values()
            .any(|(by, _)| by.as_deref().is_some_and(|by| by.starts_with("header:")));
        api || self.rules.any_grouped_by_header()
    }

    /// The payload schema of `topic`, if it has one. One map lookup; none
    /// at all while no topic has a schema.
    pub fn payload_schema(&self, topic: &str) -> Option<TopicSchema> {
        let snapshot = self.read();
        if snapshot.schemas.is_empty() {
            return None;
        }
        snapshot.schemas.get(topic).cloned()
    }

    /// Checks a payload against `topic`'s schema, if it has one (validated
    /// outside the copy's lock).
    pub fn payload_check(
        &self,
        topic: &str,
        kind: PayloadKind,
        payload: &[u8],
    ) -> Result<(), SchemaMismatch> {
        match self.payload_schema(topic) {
            Some(schema) => schema.check(kind, payload),
            None => Ok(()),
        }
    }

    pub fn is_paused(&self, topic: &str) -> bool {
        self.read().paused.contains(topic)
    }

    /// Whether a job of `topic`, claimed by a compare-and-set sent at
    /// local instant `claimed` (and so decided after it), may be sent now. Not if this copy says the
    /// topic is paused. If the copy is too old to say (MySQL unreachable
    /// for a while), only a claim younger than [`CLAIM_TRUSTED`]: a pause
    /// answers [`PAUSE_SETTLE`] after it commits, and by then either this
    /// copy was read after the pause, or the claim was decided after it
    /// (and so checked it). So once a pause has answered, nothing more of
    /// the topic is sent, however long a job was held.
    pub fn send_allowed(&self, topic: &str, claimed: Instant) -> bool {
        let snapshot = self.read();
        if snapshot.paused.contains(topic) {
            return false;
        }
        let fresh = snapshot
            .read_at
            .is_some_and(|at| at.elapsed() <= CONTROLS_FRESH);
        fresh || claimed.elapsed() < CLAIM_TRUSTED
    }

    /// Whether the claim must check paused topics in MySQL: some topic is
    /// paused, or this copy is too old to say that none is. Left out, the
    /// compare-and-set is about a third faster on MariaDB (docs/benchmarks-history.md).
    pub fn claim_checks_pauses(&self) -> bool {
        let snapshot = self.read();
        !snapshot.paused.is_empty()
            || snapshot
                .read_at
                .is_none_or(|at| at.elapsed() > CONTROLS_FRESH)
    }

    /// Reads the controls again; returns the topics paused before and not
    /// now (resumed).
    pub async fn refresh(&self) -> Result<Vec<String>, StoreError> {
        let read_at = Instant::now();
        let rows = self.store.topic_controls().await?;
        let limited: Vec<String> = self
            .in_flight_limits
            .keys()
            .filter(|topic| !self.in_flight_lock().contains_key(*topic))
            .cloned()
            .collect();
        let counted = self.in_flight_count(&limited).await?;
        self.in_flight_counted(counted, &limited, read_at, false);
        // Compiled once per text: a schema unchanged since the last read
        // is kept as compiled then.
        let previous: HashMap<String, TopicSchema> = self.read().schemas.clone();
        let mut fresh = Snapshot {
            read_at: Some(read_at),
            ..Snapshot::default()
        };
        for row in rows {
            if row.paused {
                fresh.paused.insert(row.topic.clone());
            }
            if row.group_by.is_some() || row.group_max_per_second.is_some() {
                fresh.groups.insert(
                    row.topic.clone(),
                    (row.group_by.clone(), row.group_max_per_second),
                );
            }
            if let Some(text) = &row.payload_schema {
                let schema = match previous.get(&row.topic) {
                    Some(known) if known.text() == text => known.clone(),
                    _ => TopicSchema::of_text(&row.topic, text),
                };
                fresh.schemas.insert(row.topic.clone(), schema);
            }
            if let Some(rate) = row.max_per_second {
                fresh.rates.insert(row.topic, rate);
            }
        }
        let mut snapshot = self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let resumed = snapshot
            .paused
            .iter()
            .filter(|topic| !fresh.paused.contains(*topic))
            .cloned()
            .collect();
        *snapshot = fresh;
        Ok(resumed)
    }
}

/// The refresher's settings.
#[derive(Debug, Clone)]
pub struct ControlsRefresherConfig {
    /// How often the controls are read again.
    pub every: Duration,
    /// A resumed topic's jobs due within this go back in the index.
    pub window: Duration,
}

impl Default for ControlsRefresherConfig {
    fn default() -> Self {
        ControlsRefresherConfig::from_config(&Config::default())
    }
}

impl ControlsRefresherConfig {
    pub fn from_config(config: &Config) -> Self {
        ControlsRefresherConfig {
            every: CONTROLS_REFRESH,
            window: config.window(),
        }
    }
}

/// What one read of the controls did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ControlsReport {
    /// Topics paused now.
    pub paused: usize,
    /// Topics paused at the read before and not now.
    pub resumed: Vec<String>,
    /// Jobs of resumed topics put back in the index.
    pub reindexed: u64,
}

/// Keeps this instance's [`TopicControls`] fresh. With `reindex` (the
/// reconciler's role), a topic seen resuming has its jobs due within the
/// window put back in the index — however it was resumed (the API, or an
/// UPDATE by hand).
pub struct ControlsRefresher {
    controls: TopicControls,
    config: ControlsRefresherConfig,
    reindex: Option<(Index, Arc<Notify>)>,
}

impl ControlsRefresher {
    pub fn new(
        controls: TopicControls,
        config: ControlsRefresherConfig,
        reindex: Option<(Index, Arc<Notify>)>,
    ) -> Self {
        ControlsRefresher {
            controls,
            config,
            reindex,
        }
    }
}

impl Service for ControlsRefresher {
    type Report = ControlsReport;
    type Error = StoreError;
    const NAME: &'static str = "topic controls";
    const PASS: &'static str = "topic controls";

    fn interval(&self) -> Duration {
        self.config.every
    }

    /// Reads the controls once and re-indexes the topics that resumed. A
    /// topic that cannot be re-indexed is named in the log and left to the
    /// reconciler's overdue probe.
    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<ControlsReport, StoreError> {
        let resumed = self.controls.refresh().await?;
        let mut report = ControlsReport {
            paused: self.controls.read().paused.len(),
            ..ControlsReport::default()
        };
        if let Some((index, wake)) = &self.reindex {
            for topic in &resumed {
                match topic_reindex(&self.controls.store, index, topic, self.config.window).await {
                    Ok(n) => {
                        tracing::info!(
                            topic,
                            num_jobs = n,
                            "topic resumed: its due jobs are back in the index"
                        );
                        report.reindexed += n;
                        wake.notify_one();
                    }
                    Err(err) => {
                        tracing::warn!(topic, error = %err, "cannot re-index a resumed topic; the overdue probe will")
                    }
                }
            }
        }
        report.resumed = resumed;
        Ok(report)
    }
}

/// Puts the pending jobs of `topic` due within `window` of now back in the
/// index (those already there are left alone). Returns how many were read.
pub async fn topic_reindex(
    store: &Store,
    index: &Index,
    topic: &str,
    window: Duration,
) -> Result<u64, ControlError> {
    const PAGE: u32 = 5_000;
    let until: DateTime<Utc> = store.db_now().await? + window;
    let mut after = 0;
    let mut total = 0;
    loop {
        let page = store
            .job_list_pending_topic(topic, until, after, PAGE)
            .await?;
        let entries: Vec<_> = page.iter().map(|e| (e.id, e.schedule_time)).collect();
        index.job_refeed_many(&entries).await?;
        total += page.len() as u64;
        metrics::loader_indexed(page.len());
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = last.id,
            _ => return Ok(total),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(counted: u64, groups: &[(&str, u64)]) -> InFlight {
        InFlight {
            counted,
            groups: groups.iter().map(|(g, n)| ((*g).to_owned(), *n)).collect(),
            counted_at: Instant::now(),
            grants: VecDeque::new(),
        }
    }

    const BOTH: InFlightLimits = InFlightLimits {
        topic: Some(4),
        group: Some(2),
    };

    #[test]
    fn each_group_is_held_to_its_own_room_within_the_topics() {
        let mut topic = known(1, &[("a", 1)]);
        let now = Instant::now();
        // a has room for one more, b for two, the topic for three.
        let admitted = topic.admit(BOTH, &["a", "a", "b", "b", "b"], 1.0, now);
        assert_eq!(admitted, [true, false, true, true, false]);
        assert_eq!(topic.uncounted_in("a"), 1);
        assert_eq!(topic.uncounted_in("b"), 2);
        // What went since the count takes room until a recount shows it.
        assert_eq!(topic.admit(BOTH, &["b", "c"], 1.0, now), [false, false]);
    }

    #[test]
    fn a_recount_gives_back_the_room_of_what_finished() {
        let mut topic = known(0, &[]);
        let granted_at = Instant::now();
        assert_eq!(
            topic.admit(BOTH, &["a", "a", "a"], 1.0, granted_at),
            [true, true, false]
        );
        // Counted after the grants: one of a's finished.
        let at = granted_at + Duration::from_millis(1);
        topic.recounted(
            InFlightCount {
                all: 1,
                groups: [("a".to_owned(), 1)].into(),
            },
            at,
        );
        assert_eq!(topic.uncounted(), 0);
        assert_eq!(topic.admit(BOTH, &["a", "a"], 1.0, at), [true, false]);
    }

    #[test]
    fn a_share_of_the_room_rounds_up_and_a_topic_limit_alone_ignores_groups() {
        let mut topic = known(0, &[]);
        let group_only = InFlightLimits {
            topic: None,
            group: Some(1),
        };
        // Half the shards: half of one, rounded up (one job an instance).
        let admitted = topic.admit(group_only, &["a", "a", "b"], 0.5, Instant::now());
        assert_eq!(admitted, [true, false, true]);
        let mut topic = known(0, &[]);
        let topic_only = InFlightLimits {
            topic: Some(2),
            group: None,
        };
        let admitted = topic.admit(topic_only, &["", "", ""], 1.0, Instant::now());
        assert_eq!(admitted, [true, true, false]);
    }
}
