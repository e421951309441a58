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
    /// `[topics."…"] max_in_flight`, by topic.
    in_flight_limits: Arc<HashMap<String, u32>>,
    /// Each limited topic's last count and what this instance let go.
    in_flight: Arc<Mutex<HashMap<String, InFlight>>>,
}

/// A topic with a `max_in_flight`, as this instance knows it.
#[derive(Debug)]
struct InFlight {
    /// Its jobs dispatching or dispatched at the last count.
    counted: u64,
    /// When that count was asked for.
    counted_at: Instant,
    /// What this instance let go, and when: those let go after the count
    /// take room beside it. The dispatcher counts again between its passes
    /// ([`TopicControls::in_flight_recount`]), when every claim it let go
    /// before has committed and so shows in the count.
    grants: VecDeque<(Instant, u64)>,
}

impl InFlight {
    fn recounted(&mut self, counted: u64, at: Instant) {
        if at <= self.counted_at {
            return;
        }
        self.counted = counted;
        self.counted_at = at;
        while self
            .grants
            .front()
            .is_some_and(|(granted, _)| *granted < at)
        {
            self.grants.pop_front();
        }
    }

    /// Let go since the count.
    fn uncounted(&self) -> u64 {
        self.grants.iter().map(|(_, n)| n).sum()
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
                    .collect(),
            ),
        }
    }

    /// Whether any topic has a `max_in_flight` (else the dispatcher skips
    /// the check).
    pub fn any_in_flight_limited(&self) -> bool {
        !self.in_flight_limits.is_empty()
    }

    pub fn in_flight_limit(&self, topic: &str) -> Option<u32> {
        self.in_flight_limits.get(topic).copied()
    }

    fn in_flight_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlight>> {
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many of `want` due jobs of `topic` this instance may let go
    /// now under its `max_in_flight`: its `share` (the part of the shards
    /// it holds) of what the limit leaves over the last count, less what it
    /// let go since (or too shortly before the count to show in it). The
    /// count is read every second, and again by a dispatcher held back;
    /// the instances' shares add up to the room left, so the fleet stays
    /// within the limit but for rounding (one job an instance). Without a
    /// count yet, nothing goes: the limit is kept from the first job.
    pub fn in_flight_admit(&self, topic: &str, want: usize, share: f64) -> usize {
        let Some(limit) = self.in_flight_limit(topic) else {
            return want;
        };
        let mut all = self.in_flight_lock();
        let Some(known) = all.get_mut(topic) else {
            return 0;
        };
        let room = u64::from(limit).saturating_sub(known.counted) as f64;
        let mine = (room * share.clamp(0.0, 1.0)).ceil() as u64;
        let granted = mine.saturating_sub(known.uncounted()).min(want as u64);
        if granted > 0 {
            known.grants.push_back((Instant::now(), granted));
        }
        granted as usize
    }

    /// Records a count of the limited topics' jobs in flight, asked for at
    /// `at`: the first of each topic's (the controls' read), or the
    /// dispatcher's own (`recount`), made between its passes. A read of
    /// the controls does not count again: it runs beside the dispatcher,
    /// and could miss a claim not yet committed.
    fn in_flight_counted(
        &self,
        counted: &HashMap<String, u64>,
        topics: &[String],
        at: Instant,
        recount: bool,
    ) {
        let mut all = self.in_flight_lock();
        for topic in topics {
            let n = counted.get(topic).copied().unwrap_or(0);
            match all.get_mut(topic) {
                Some(known) if recount => known.recounted(n, at),
                Some(_) => {}
                None => {
                    all.insert(
                        topic.clone(),
                        InFlight {
                            counted: n,
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
        let counted = self.store.topic_in_flight(&topics).await?;
        self.in_flight_counted(&counted, &topics, counted_at, true);
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
        let counted = self.store.topic_in_flight(&limited).await?;
        self.in_flight_counted(&counted, &limited, read_at, false);
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
