//! The doctor: checks MySQL ↔ Redis ↔ Kafka against each other and says
//! what it found and how to fix it; [`Doctor::repair`] applies the safe
//! fixes. `tickler doctor` (src/cli/doctor.rs) runs it once and prints the
//! report. It is the one service without a `run` loop: it is asked, once,
//! by a person.
//!
//! Every finding about a moving system is confirmed before it is reported:
//! candidates of the first look are looked at again after `settle`, and
//! only those still wrong count (a job created a moment ago is not yet in
//! Redis; a job dispatched a moment ago is still there).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{Config, HandEdits};
use crate::domain::delivery::Verify;
use crate::domain::job::{JobId, Status};
use crate::index::Index;
use crate::kafka::{self, RecordAt};
use crate::roles::verifier::SWEEP_LOOKBACK;
use crate::store::{Store, StoreError};

/// Most window rows and Redis ids one run compares.
const WINDOW_MAX: u32 = 200_000;
/// Dispatched jobs per status whose Kafka position is read back.
const POSITIONS_SAMPLED: u32 = 10;
/// Ids a finding lists.
const IDS_SHOWN: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    /// Worth a look; not an inconsistency.
    Warn,
    /// Something is wrong.
    Fail,
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub verdict: Verdict,
    pub summary: String,
    /// How many rows or ids are concerned.
    pub count: u64,
    /// Some of them.
    pub ids: Vec<JobId>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    fn ok(check: &'static str, summary: String) -> Finding {
        Finding {
            check,
            verdict: Verdict::Ok,
            summary,
            count: 0,
            ids: Vec::new(),
            fix: None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct DoctorReport {
    pub findings: Vec<Finding>,
    /// What `--repair` did, when asked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repaired: Vec<String>,
}

impl DoctorReport {
    pub fn healthy(&self) -> bool {
        self.findings.iter().all(|f| f.verdict != Verdict::Fail)
    }
}

/// What the repairs act on, kept from the examination.
#[derive(Debug, Default)]
struct Candidates {
    unindexed: Vec<(JobId, chrono::DateTime<chrono::Utc>)>,
    stale: Vec<JobId>,
    expired_claims: u64,
}

/// The doctor's settings.
#[derive(Debug, Clone)]
pub struct DoctorConfig {
    /// How long a first finding is left to settle before it is confirmed.
    pub settle: Duration,
    /// Results lag above this is a warning.
    pub lag_warn: i64,
    /// A clock further apart than this is a failure.
    pub clock_max: Duration,
    /// The deployment's settings: the checks compare the stores with them
    /// (window, shards, Kafka and its options, the results topic).
    pub settings: Config,
}

impl DoctorConfig {
    pub fn from_config(config: &Config) -> Self {
        DoctorConfig {
            settle: Duration::from_secs(2),
            lag_warn: 10_000,
            clock_max: Duration::from_secs(1),
            settings: config.clone(),
        }
    }
}

pub struct Doctor {
    store: Store,
    index: Index,
    doctor: DoctorConfig,
    /// `doctor.settings`, for short.
    config: Config,
}

impl Doctor {
    pub fn new(store: Store, index: Index, config: DoctorConfig) -> Doctor {
        Doctor {
            store,
            index,
            config: config.settings.clone(),
            doctor: config,
        }
    }

    /// Runs every check.
    pub async fn run_once(&self) -> DoctorReport {
        self.examine_keeping().await.0
    }

    /// Runs every check, applies the safe fixes to what it found, and
    /// checks again.
    pub async fn repair(&self) -> DoctorReport {
        let (_, mut candidates) = self.examine_keeping().await;
        // The checks after these took seconds (Kafka): a job may have moved
        // on since it was confirmed. Only what is still so is repaired.
        if let Err(err) = self.still_so(&mut candidates).await {
            let mut report = self.run_once().await;
            report.repaired = vec![format!("repaired nothing: {err}")];
            return report;
        }
        let mut repaired = Vec::new();
        if !candidates.unindexed.is_empty() {
            // Only ids still pending and still absent: the confirmation
            // was a moment ago.
            match self.index.job_add_many(&candidates.unindexed).await {
                Ok(()) => repaired.push(format!(
                    "indexed {} pending jobs Redis lacked",
                    candidates.unindexed.len()
                )),
                Err(err) => repaired.push(format!("could not index the missing jobs: {err}")),
            }
        }
        if !candidates.stale.is_empty() {
            match self.index.job_remove_many(&candidates.stale).await {
                Ok(n) => repaired.push(format!(
                    "removed {n} Redis entries of jobs not pending in MySQL"
                )),
                Err(err) => repaired.push(format!("could not remove the stale entries: {err}")),
            }
        }
        if candidates.expired_claims > 0 {
            match self.rescue_claims().await {
                Ok(n) => repaired.push(format!(
                    "returned {n} expired claims to pending and requeued them"
                )),
                Err(err) => repaired.push(format!("could not rescue the expired claims: {err}")),
            }
        }
        let mut report = self.run_once().await;
        report.repaired = repaired;
        report
    }

    /// Keeps only the candidates still wrong now.
    async fn still_so(&self, candidates: &mut Candidates) -> Result<(), DoctorError> {
        let ids: Vec<JobId> = candidates
            .unindexed
            .iter()
            .map(|(id, _)| *id)
            .chain(candidates.stale.iter().copied())
            .collect();
        let statuses = self.store.job_statuses(&ids).await?;
        let mut unindexed = Vec::new();
        for (id, at) in std::mem::take(&mut candidates.unindexed) {
            if statuses.get(&id) == Some(&Status::Pending)
                && self.index.job_locate(id).await?.is_none()
            {
                unindexed.push((id, at));
            }
        }
        candidates.unindexed = unindexed;
        candidates.stale.retain(|id| {
            !matches!(
                statuses.get(id),
                Some(Status::Pending) | Some(Status::Dispatching)
            )
        });
        Ok(())
    }

    /// Settles every claim in doubt whose quiet time is over, by reading
    /// its topic back (as the reconciler does each pass). Returns how many
    /// went back to pending.
    async fn rescue_claims(&self) -> Result<usize, String> {
        let resume = std::sync::Mutex::new(crate::kafka::readback::Resume::default());
        let read_back = crate::roles::reconciler::ReadBack {
            brokers: &self.config.kafka.brokers,
            options: &self.config.kafka.options,
            wait: crate::roles::reconciler::READBACK_WAIT,
            resume: &resume,
        };
        let mut total = 0;
        // Rounds in a row that only went on with a long reading: bounded,
        // so a broker that stops answering mid-read does not hold the
        // doctor for ever.
        let mut reading_on = 0;
        loop {
            let settled = crate::roles::reconciler::doubts_settle(
                &self.store,
                &self.index,
                &read_back,
                1_000,
                &std::collections::HashSet::new(),
            )
            .await
            .map_err(|e| e.to_string())?;
            // A reading that ran out of time goes on in the next round.
            let resuming = settled.failed.keys().all(|t| settled.resuming.contains(t));
            if settled.unsettled > 0 && !resuming {
                let why: Vec<String> = settled
                    .failed
                    .iter()
                    .map(|(topic, why)| format!("{topic}: {why}"))
                    .collect();
                return Err(format!(
                    "kafka could not be read back to settle {} claims in doubt ({})",
                    settled.unsettled,
                    why.join("; ")
                ));
            }
            if settled.absent + settled.produced == 0 && !settled.resuming.is_empty() {
                reading_on += 1;
                if reading_on > 100 {
                    return Err(format!(
                        "kafka read back for 100 rounds without settling a claim in doubt ({})",
                        settled
                            .resuming
                            .iter()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            } else {
                reading_on = 0;
            }
            total += settled.absent;
            // Each pass takes a few topics' doubts: on until one settles
            // nothing more (and stopped nowhere).
            if settled.absent + settled.produced == 0 && settled.resuming.is_empty() {
                return Ok(total);
            }
        }
    }

    async fn examine_keeping(&self) -> (DoctorReport, Candidates) {
        let mut candidates = Candidates::default();
        let mut findings = Vec::new();
        findings.push(
            self.check_index(&mut candidates)
                .await
                .unwrap_or_else(|err| unreachable_store("window", err)),
        );
        let stale = self.check_stale(&mut candidates).await;
        findings.push(stale.unwrap_or_else(|err| unreachable_store("index_stale", err)));
        findings.push(
            self.check_claims(&mut candidates)
                .await
                .unwrap_or_else(|err| unreachable_store("claims", err)),
        );
        findings.push(
            self.check_unreadable()
                .await
                .unwrap_or_else(|err| unreachable_store("unreadable", err)),
        );
        findings.push(
            self.check_held()
                .await
                .unwrap_or_else(|err| unreachable_store("held", err)),
        );
        findings.push(
            self.check_keys()
                .await
                .unwrap_or_else(|err| unreachable_store("keys", err)),
        );
        findings.push(self.check_positions().await);
        findings.push(
            self.check_topics()
                .await
                .unwrap_or_else(|err| unreachable_store("topics", err)),
        );
        findings.push(
            self.check_consumers()
                .await
                .unwrap_or_else(|err| unreachable_store("consumers", err)),
        );
        findings.push(
            self.check_verification()
                .await
                .unwrap_or_else(|err| unreachable_store("verification", err)),
        );
        findings.push(self.check_lag().await);
        findings.extend(self.check_ingress_lag().await);
        findings.push(
            self.check_schedules()
                .await
                .unwrap_or_else(|err| unreachable_store("schedules", err)),
        );
        findings.push(self.check_clocks().await);
        findings.push(
            self.check_tzdata()
                .await
                .unwrap_or_else(|err| unreachable_store("tzdata", err)),
        );
        findings.push(
            self.check_triggers()
                .await
                .unwrap_or_else(|err| unreachable_store("triggers", err)),
        );
        (
            DoctorReport {
                findings,
                repaired: Vec::new(),
            },
            candidates,
        )
    }

    /// Pending jobs due within the window that Redis lacks.
    async fn check_index(&self, candidates: &mut Candidates) -> Result<Finding, DoctorError> {
        const CHECK: &str = "window";
        let window = self.config.window();
        let rows = self.store.job_window_pending(window, WINDOW_MAX).await?;
        let (due, inflight) = self.index.members().await?;
        let indexed: HashSet<JobId> = due
            .iter()
            .map(|(id, _)| *id)
            .chain(inflight.iter().copied())
            .collect();
        let first: Vec<_> = rows
            .iter()
            .filter(|(id, _)| !indexed.contains(id))
            .copied()
            .collect();
        let missing = if first.is_empty() {
            first
        } else {
            tokio::time::sleep(self.doctor.settle).await;
            let ids: Vec<JobId> = first.iter().map(|(id, _)| *id).collect();
            let statuses = self.store.job_statuses(&ids).await?;
            let mut confirmed = Vec::new();
            for (id, at) in first {
                if statuses.get(&id) == Some(&Status::Pending)
                    && self.index.job_locate(id).await?.is_none()
                {
                    confirmed.push((id, at));
                }
            }
            confirmed
        };
        let checked = rows.len();
        let capped = if checked as u32 == WINDOW_MAX {
            format!(" (the first {WINDOW_MAX})")
        } else {
            String::new()
        };
        if missing.is_empty() {
            return Ok(Finding::ok(
                CHECK,
                format!("every pending job due within the window is in Redis: {checked} checked{capped}"),
            ));
        }
        let finding = Finding {
            check: CHECK,
            verdict: Verdict::Fail,
            summary: format!(
                "{} pending jobs due within the window are missing from Redis{capped}",
                missing.len()
            ),
            count: missing.len() as u64,
            ids: missing.iter().take(IDS_SHOWN).map(|(id, _)| *id).collect(),
            fix: Some(
                "tickler doctor --repair indexes them; left alone, the reconciler re-feeds each once it is reconciler.grace_ms overdue (late, never lost)".to_owned(),
            ),
        };
        candidates.unindexed = missing;
        Ok(finding)
    }

    /// Redis ids whose job is not pending (due) or dispatching (in
    /// flight) in MySQL, or no longer exists.
    async fn check_stale(&self, candidates: &mut Candidates) -> Result<Finding, DoctorError> {
        const CHECK: &str = "index_stale";
        let (due, inflight) = self.index.members().await?;
        let ids: Vec<JobId> = due
            .iter()
            .map(|(id, _)| *id)
            .chain(inflight.iter().copied())
            .take(WINDOW_MAX as usize)
            .collect();
        let stale = |statuses: &HashMap<JobId, Status>, id: &JobId| {
            !matches!(
                statuses.get(id),
                Some(Status::Pending) | Some(Status::Dispatching)
            )
        };
        let statuses = self.store.job_statuses(&ids).await?;
        let first: Vec<JobId> = ids
            .iter()
            .filter(|id| stale(&statuses, id))
            .copied()
            .collect();
        let confirmed = if first.is_empty() {
            first
        } else {
            tokio::time::sleep(self.doctor.settle).await;
            let statuses = self.store.job_statuses(&first).await?;
            let mut confirmed = Vec::new();
            for id in first {
                if stale(&statuses, &id) && self.index.job_locate(id).await?.is_some() {
                    confirmed.push(id);
                }
            }
            confirmed
        };
        if confirmed.is_empty() {
            return Ok(Finding::ok(
                CHECK,
                format!(
                    "every Redis entry is a pending or dispatching job: {} checked",
                    ids.len()
                ),
            ));
        }
        let finding = Finding {
            check: CHECK,
            verdict: Verdict::Fail,
            summary: format!(
                "{} Redis entries are jobs no longer pending in MySQL (or gone)",
                confirmed.len()
            ),
            count: confirmed.len() as u64,
            ids: confirmed.iter().take(IDS_SHOWN).copied().collect(),
            fix: Some(
                "harmless to delivery (the dispatcher's compare-and-set refuses them), but they cost Redis memory and claims: tickler doctor --repair removes them".to_owned(),
            ),
        };
        candidates.stale = confirmed;
        Ok(finding)
    }

    /// `dispatching` rows whose claim lease expired.
    async fn check_claims(&self, candidates: &mut Candidates) -> Result<Finding, DoctorError> {
        const CHECK: &str = "claims";
        let (count, oldest_ms) = self.store.job_claims_expired().await?;
        if count == 0 {
            return Ok(Finding::ok(CHECK, "no claim is past its lease".to_owned()));
        }
        candidates.expired_claims = count;
        // By topic, the longest waiting first: a topic that cannot be read
        // back holds its own claims only.
        let topics: Vec<String> = self
            .store
            .job_doubt_topics()
            .await?
            .iter()
            .take(10)
            .map(|(topic, n)| format!("{topic} ({n})"))
            .collect();
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Fail,
            summary: format!(
                "{count} dispatching jobs are past their claim lease (or their doubt's quiet time) and not yet settled, the oldest by {} s; by topic: {}",
                oldest_ms / 1000,
                topics.join(", ")
            ),
            count,
            ids: Vec::new(),
            fix: Some(
                "the reconciler reads their topics back every reconciler.interval_ms and marks each dispatched or returns it to pending — is an instance with the reconciler role running (tickler instances), and can it read Kafka? tickler doctor --repair does it now".to_owned(),
            ),
        })
    }

    /// Jobs set aside as dead because their row did not decode when
    /// claimed (a hand edit the column accepted, such as `headers = '7'`).
    async fn check_unreadable(&self) -> Result<Finding, DoctorError> {
        const CHECK: &str = "unreadable";
        let (count, ids) = self.store.job_unreadable(20).await?;
        if count == 0 {
            return Ok(Finding::ok(
                CHECK,
                "no job was set aside as unreadable".to_owned(),
            ));
        }
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Warn,
            summary: format!("{count} jobs were set aside as dead because their row does not decode"),
            count,
            ids,
            fix: Some(
                "last_error says which column; repair it by hand (e.g. UPDATE jobs SET headers = NULL WHERE id = …), then POST /v1/jobs/{id}/redrive".to_owned(),
            ),
        })
    }

    /// Pending jobs held back because their payload no longer matched
    /// their topic's payload schema when they came due: never sent until
    /// released, so someone must look.
    async fn check_held(&self) -> Result<Finding, DoctorError> {
        const CHECK: &str = "held";
        let (count, ids) = self.store.jobs_held(IDS_SHOWN as u32).await?;
        if count == 0 {
            return Ok(Finding::ok(CHECK, "no job is held".to_owned()));
        }
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Warn,
            summary: format!(
                "{count} pending jobs are held: their payload no longer matches their topic's payload_schema"
            ),
            count,
            ids,
            fix: Some(
                "GET /v1/jobs?held=true lists them with held_reason; fix each payload (PATCH /v1/jobs/{id}) or the schema, then POST /v1/jobs/{id}/release (force: true sends it as it is), or cancel it".to_owned(),
            ),
        })
    }

    /// Jobs sealed under a key this configuration lacks (`encryption.keys`):
    /// a retired key removed too soon, or a key file missing. Such a job is
    /// set aside unsent when it falls due, and its payload cannot be read.
    async fn check_keys(&self) -> Result<Finding, DoctorError> {
        const CHECK: &str = "keys";
        // The keys processes said they seal with (`enc_keys_used`), not a
        // read of every row: bounded at any size of the table.
        let used = self.store.keys_used().await?;
        let missing: Vec<_> = used
            .iter()
            .filter(|used| !self.store.keys().has(&used.key))
            .collect();
        if missing.is_empty() {
            let names: Vec<&str> = used.iter().map(|used| used.key.as_str()).collect();
            return Ok(Finding::ok(
                CHECK,
                if names.is_empty() {
                    "no row is sealed (encryption was never on)".to_owned()
                } else {
                    format!(
                        "rows are sealed under {}, every one a key this configuration has",
                        names.join(", ")
                    )
                },
            ));
        }
        let named: Vec<String> = missing
            .iter()
            .map(|used| {
                format!(
                    "{:?} (sealed with until {})",
                    used.key,
                    crate::domain::job::time_format(used.last_at)
                )
            })
            .collect();
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Fail,
            summary: format!(
                "rows are sealed under keys this configuration lacks: {} (tickler keys status counts them)",
                named.join(", ")
            ),
            count: missing.len() as u64,
            ids: Vec::new(),
            fix: Some(
                "put each key back in encryption.keys (file: or env:) and restart; then run tickler keys rotate, and redrive the jobs set aside as unreadable meanwhile".to_owned(),
            ),
        })
    }

    /// Recently dispatched jobs: is their record where MySQL says?
    ///
    /// Long because it is one check with its confirmation: sample, read back
    /// topic by topic, look again at what was not found, word the finding.
    async fn check_positions(&self) -> Finding {
        const CHECK: &str = "kafka_positions";
        let positions = match self.store.job_positions_recent(POSITIONS_SAMPLED).await {
            Ok(positions) => positions,
            Err(err) => return unreachable_store(CHECK, err.into()),
        };
        let mut wrong = Vec::new();
        let mut notes = Vec::new();
        let mut unverified = 0;
        let mut expired = 0;
        for position in &positions {
            let found = kafka::record_at(
                &self.config.kafka.brokers,
                &self.config.kafka.options,
                &position.topic,
                position.partition,
                position.offset,
                Duration::from_secs(2),
            )
            .await;
            let id = position.id.to_string();
            match found {
                Ok(RecordAt::Found(Some(job_id))) if job_id == id => {}
                Ok(RecordAt::Found(other)) => {
                    wrong.push(position.id);
                    notes.push(format!(
                        "job {id}: {}/{}@{} holds {}",
                        position.topic,
                        position.partition,
                        position.offset,
                        other.map_or("no tickler-job-id".to_owned(), |o| format!(
                            "job {o}'s record"
                        ))
                    ));
                }
                Ok(RecordAt::PastEnd { high }) => {
                    wrong.push(position.id);
                    notes.push(format!(
                        "job {id}: offset {} is past the end of {}/{} ({high})",
                        position.offset, position.topic, position.partition
                    ));
                }
                Ok(RecordAt::NoPartition) => {
                    wrong.push(position.id);
                    notes.push(format!(
                        "job {id}: {}/{} does not exist",
                        position.topic, position.partition
                    ));
                }
                Ok(RecordAt::Expired { .. }) | Ok(RecordAt::Compacted) => expired += 1,
                Ok(RecordAt::Unverified) => unverified += 1,
                Err(err) => {
                    return Finding {
                        check: CHECK,
                        verdict: Verdict::Warn,
                        summary: format!("Kafka could not be read: {err}"),
                        count: 0,
                        ids: Vec::new(),
                        fix: Some("check kafka.brokers and the broker".to_owned()),
                    }
                }
            }
        }
        let sampled = positions.len();
        let aside = format!(
            "{}{}",
            if expired > 0 {
                format!("; {expired} deleted by the topic's retention or compaction")
            } else {
                String::new()
            },
            if unverified > 0 {
                format!("; {unverified} could not be read in time")
            } else {
                String::new()
            },
        );
        if wrong.is_empty() {
            return Finding {
                verdict: if unverified > 0 {
                    Verdict::Warn
                } else {
                    Verdict::Ok
                },
                ..Finding::ok(
                    CHECK,
                    format!(
                        "the latest {sampled} dispatched jobs' records are where MySQL says{aside}"
                    ),
                )
            };
        }
        Finding {
            check: CHECK,
            verdict: Verdict::Fail,
            summary: format!(
                "{} of the latest {sampled} dispatched jobs have no record of theirs at the recorded position{aside}: {}",
                wrong.len(),
                notes.join("; ")
            ),
            count: wrong.len() as u64,
            ids: wrong,
            fix: Some(
                "not repaired automatically (producing again could double a delivery): check the topic (recreated? truncated?) and the broker's acks; to produce a job again, use the requeue recipe in docs/schema.md".to_owned(),
            ),
        }
    }

    /// Whether the topics of the jobs due within a day exist on the
    /// broker: a job for a topic it lacks is refused when due (a failed
    /// attempt each).
    async fn check_topics(&self) -> Result<Finding, DoctorError> {
        const CHECK: &str = "topics";
        let due = self
            .store
            .job_topics_due_within(Duration::from_secs(86_400), 1_000)
            .await?;
        if due.is_empty() {
            return Ok(Finding::ok(CHECK, "no job is due within a day".to_owned()));
        }
        let names: Vec<String> = due.iter().map(|(topic, _)| topic.clone()).collect();
        let ends = match kafka::partition_ends(
            &self.config.kafka.brokers,
            &self.config.kafka.options,
            names,
        )
        .await
        {
            Ok(ends) => ends,
            Err(err) => {
                return Ok(Finding {
                    check: CHECK,
                    verdict: Verdict::Warn,
                    summary: format!("Kafka could not be asked for its topics: {err}"),
                    count: 0,
                    ids: Vec::new(),
                    fix: Some("check kafka.brokers and the broker".to_owned()),
                })
            }
        };
        let lacking: Vec<&(String, u64)> = due
            .iter()
            .filter(|(topic, _)| {
                ends.get(topic)
                    .is_none_or(|partitions| partitions.is_empty())
            })
            .collect();
        if lacking.is_empty() {
            return Ok(Finding::ok(
                CHECK,
                format!(
                    "the {} topics of the jobs due within a day exist on the broker",
                    due.len()
                ),
            ));
        }
        let jobs: u64 = lacking.iter().map(|(_, n)| n).sum();
        let named: Vec<String> = lacking
            .iter()
            .take(10)
            .map(|(topic, n)| format!("{topic} ({n})"))
            .collect();
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Fail,
            summary: format!(
                "{jobs} jobs due within a day are for {} topics the broker does not have: {}",
                lacking.len(),
                named.join(", ")
            ),
            count: jobs,
            ids: Vec::new(),
            fix: Some(
                "create the topics (each job is refused when due otherwise, a failed attempt each), or cancel their jobs: tickler jobs bulk --status pending --topic T cancel".to_owned(),
            ),
        })
    }

    /// Whether the consumer groups configured for each topic are followed:
    /// a group whose committed offsets were never seen does not exist under
    /// that name, has committed nothing, or no reconciler follows it.
    async fn check_consumers(&self) -> Result<Finding, DoctorError> {
        const CHECK: &str = "consumers";
        let recorded = self.store.consumer_groups_recorded().await?;
        let mut silent = Vec::new();
        for (topic, settings) in &self.config.topics {
            for group in settings.consumer_groups.iter().flatten() {
                if !recorded
                    .get(topic)
                    .is_some_and(|groups| groups.contains(group))
                {
                    silent.push(format!("{group} on {topic}"));
                }
            }
        }
        let followed: usize = recorded.values().map(|groups| groups.len()).sum();
        if silent.is_empty() {
            return Ok(Finding::ok(
                CHECK,
                format!(
                    "{followed} consumer groups followed on {} topics",
                    recorded.len()
                ),
            ));
        }
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Warn,
            summary: format!(
                "{} configured consumer groups were never seen committing: {}",
                silent.len(),
                silent.join(", ")
            ),
            count: silent.len() as u64,
            ids: Vec::new(),
            fix: Some(
                "check the group's name in [topics.T] consumer_groups against the consumers' group.id, that they commit offsets, and that an instance with the reconciler role runs".to_owned(),
            ),
        })
    }

    /// Whether the live instances resolve local times with one tzdata
    /// release: two that differ compute a wall-clock job's instant
    /// differently until they agree (each moves only forward, so nothing
    /// goes back and forth, but a create answers by its own).
    async fn check_tzdata(&self) -> Result<Finding, DoctorError> {
        const CHECK: &str = "tzdata";
        let instances = self
            .store
            .instances_list(self.config.instance_ttl())
            .await?;
        let mut releases: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
        for instance in instances.iter().filter(|instance| instance.live) {
            let release = instance
                .tzdata_version
                .clone()
                .unwrap_or_else(|| "unknown (built before #60)".to_owned());
            releases.entry(release).or_default().push(instance.id);
        }
        let said = |releases: &std::collections::BTreeMap<String, Vec<u64>>| {
            releases
                .iter()
                .map(|(release, ids)| {
                    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
                    format!("{release} (instances {})", ids.join(", "))
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        if releases.len() <= 1 {
            let release = releases.keys().next().cloned().unwrap_or_else(|| {
                format!(
                    "{} here, no live instance",
                    crate::domain::zones::current().version()
                )
            });
            return Ok(Finding::ok(
                CHECK,
                format!("every live instance resolves local times with tzdata {release}"),
            ));
        }
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Warn,
            summary: format!(
                "live instances resolve local times with different tzdata releases: {}",
                said(&releases)
            ),
            count: releases.len() as u64,
            ids: Vec::new(),
            fix: Some(
                "update the tzdata directory (tzdata.path, e.g. the OS package tzdata) on every host; each instance loads a newer release within tzdata.check_ms, no restart".to_owned(),
            ),
        })
    }

    /// Whether the jobs dispatched in the last hour were read back on
    /// their topics ([`crate::roles::verifier`]): a warning for those still
    /// unverified two minutes after their mark.
    async fn check_verification(&self) -> Result<Finding, DoctorError> {
        const CHECK: &str = "verification";
        if self.config.dispatcher.verify.is_off() {
            return Ok(Finding::ok(
                CHECK,
                "dispatcher.verify = off: records are not read back".to_owned(),
            ));
        }
        if let Verify::Sample(_) = self.config.dispatcher.verify {
            // The rows left out of the sample are unverified by design.
            return Ok(Finding::ok(
                CHECK,
                format!(
                    "a share of records is read back (dispatcher.verify = {}): see tickler_delivery_verify_lag_seconds",
                    self.config.dispatcher.verify
                ),
            ));
        }
        let now = self.store.db_now().await?;
        let from = now - chrono::Duration::from_std(SWEEP_LOOKBACK).unwrap_or_default();
        let until = now - chrono::Duration::minutes(2);
        let (count, oldest) = self.store.job_unverified_count(from, until).await?;
        let Some((id, at)) = oldest.filter(|_| count > 0) else {
            return Ok(Finding::ok(
                CHECK,
                format!(
                    "the jobs dispatched in the last hour were read back on their topics (dispatcher.verify = {})",
                    self.config.dispatcher.verify
                ),
            ));
        };
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Warn,
            summary: format!(
                "{count} jobs dispatched in the last hour are not read back two minutes later (oldest: job {id}, marked {})",
                crate::domain::job::time_format(at)
            ),
            count,
            ids: vec![id],
            fix: Some(
                "is an instance with the dispatcher role running, with dispatcher.verify on (a sample leaves the rest unverified), and can it read the topics? (tickler_delivery_verify_lag_seconds, tickler_delivery_unverified_total)".to_owned(),
            ),
        })
    }

    async fn check_lag(&self) -> Finding {
        self.check_group_lag(
            "results_lag",
            "the results consumer",
            &self.config.results.group,
            &self.config.results.topic,
            "is an instance with the results role running and keeping up? (tickler instances, tickler_results_applied_total)",
        )
        .await
    }

    /// The ingress's lag on each request topic, when there are any.
    async fn check_ingress_lag(&self) -> Vec<Finding> {
        let mut findings = Vec::new();
        for topic in self.config.ingress.topics.keys() {
            findings.push(
                self.check_group_lag(
                    "ingress_lag",
                    "the ingress",
                    &self.config.ingress.group,
                    topic,
                    "is an instance with the ingress role running and keeping up? (tickler instances, tickler_ingress_requests_total)",
                )
                .await,
            );
        }
        findings
    }

    /// How far `group` is behind on `topic`: a warning above `lag_warn`
    /// or when it cannot be read.
    async fn check_group_lag(
        &self,
        check: &'static str,
        who: &str,
        group: &str,
        topic: &str,
        fix: &str,
    ) -> Finding {
        let summary = |lag: i64| format!("{who} ({group}) is {lag} records behind on {topic}");
        match kafka::group_lag(
            &self.config.kafka.brokers,
            &self.config.kafka.options,
            group,
            topic,
        )
        .await
        {
            Ok(lag) if lag > self.doctor.lag_warn => Finding {
                check,
                verdict: Verdict::Warn,
                summary: summary(lag),
                count: lag as u64,
                ids: Vec::new(),
                fix: Some(fix.to_owned()),
            },
            Ok(lag) => Finding::ok(check, summary(lag)),
            Err(err) => Finding {
                check,
                verdict: Verdict::Warn,
                summary: format!("the lag of {who} ({group}) on {topic} could not be read: {err}"),
                count: 0,
                ids: Vec::new(),
                fix: Some(format!(
                    "check kafka.brokers, {topic} and the group {group}"
                )),
            },
        }
    }

    /// Active schedules whose next occurrence is a minute past its time
    /// and still not a job: the materializer (loader role) is not running.
    async fn check_schedules(&self) -> Result<Finding, DoctorError> {
        const CHECK: &str = "schedules";
        let behind = self
            .store
            .schedules_behind(
                crate::roles::reporter::truth::SCHEDULE_BEHIND,
                IDS_SHOWN as u32,
            )
            .await?;
        let Some((_, oldest)) = behind.first() else {
            return Ok(Finding::ok(
                CHECK,
                "every active schedule has its next occurrence on time".to_owned(),
            ));
        };
        let count = self
            .store
            .schedule_stats(crate::roles::reporter::truth::SCHEDULE_BEHIND)
            .await?
            .behind;
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Fail,
            summary: format!(
                "{count} active schedules are behind: the oldest next occurrence, {}, is not a job yet (ids are schedule ids)",
                crate::domain::job::time_format(*oldest)
            ),
            count,
            ids: behind.iter().map(|(id, _)| *id).collect(),
            fix: Some(
                "run an instance with the loader role (tickler instances); a schedule edited by hand into an unreadable cron or time zone is named in the loader's log".to_owned(),
            ),
        })
    }

    /// The triggers on `jobs` (the optional ones that record hand edits, or
    /// a legacy one): each must be able to run, or every write fails.
    async fn check_triggers(&self) -> Result<Finding, DoctorError> {
        const CHECK: &str = "triggers";
        let (triggers, broken) = self.store.triggers_check().await?;
        if triggers.is_empty() {
            let hand_edits = if self.config.mysql.history_hand_edits == HandEdits::Observe {
                "hand edits in SQL are observed by the reconciler and recorded"
            } else {
                "hand edits in SQL are not recorded"
            };
            return Ok(Finding::ok(
                CHECK,
                format!("no trigger on jobs ({hand_edits})"),
            ));
        }
        if broken.is_empty() {
            let names: Vec<String> = triggers
                .iter()
                .map(|(name, definer)| format!("{name} (definer {definer})"))
                .collect();
            return Ok(Finding::ok(
                CHECK,
                format!("the triggers on jobs run: {}", names.join(", ")),
            ));
        }
        let names: Vec<String> = broken
            .iter()
            .map(|t| format!("{} (definer {})", t.name, t.definer))
            .collect();
        Ok(Finding {
            check: CHECK,
            verdict: Verdict::Fail,
            summary: format!(
                "every write to jobs fails: the account that created these triggers is gone: {} ({})",
                names.join(", "),
                broken[0].error
            ),
            count: broken.len() as u64,
            ids: Vec::new(),
            fix: Some(format!(
                "drop them ({}) and run tickler migrate with mysql.history_hand_edits = trigger from an account that stays, or set mysql.history_hand_edits = off (docs/schema.md, \"History\")",
                broken
                    .iter()
                    .map(|t| format!("DROP TRIGGER {};", t.name))
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
        })
    }

    /// This host's, MySQL's and Redis's clocks, each read between two
    /// readings of ours (offset = theirs − our midpoint).
    async fn check_clocks(&self) -> Finding {
        const CHECK: &str = "clocks";
        let ours = || chrono::Utc::now().timestamp_millis();
        let read = async {
            let before = ours();
            let started = Instant::now();
            let mysql = self.store.db_now().await?.timestamp_millis();
            let mysql_rtt = started.elapsed().as_millis() as i64;
            let mysql_offset = mysql - (before + mysql_rtt / 2);
            let before = ours();
            let started = Instant::now();
            let redis = self.index.now_ms().await?;
            let redis_rtt = started.elapsed().as_millis() as i64;
            let redis_offset = redis - (before + redis_rtt / 2);
            Ok::<_, DoctorError>((mysql_offset, redis_offset))
        };
        match read.await {
            Ok((mysql, redis)) => {
                let max = self.doctor.clock_max.as_millis() as i64;
                let summary = format!(
                    "MySQL is {mysql:+} ms from this host, Redis {redis:+} ms, Redis {:+} ms from MySQL",
                    redis - mysql
                );
                let apart = mysql.abs() > max || redis.abs() > max || (redis - mysql).abs() > max;
                if apart {
                    Finding {
                        check: CHECK,
                        verdict: Verdict::Fail,
                        summary,
                        count: 0,
                        ids: Vec::new(),
                        fix: Some(format!(
                            "clocks more than {max} ms apart: due-ness is MySQL's call, so nothing goes out early, but Redis claims jobs MySQL does not yet call due (wasted claims) or late (lateness); run NTP/chrony on every host"
                        )),
                    }
                } else {
                    Finding::ok(CHECK, summary)
                }
            }
            Err(err) => unreachable_store(CHECK, err),
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum DoctorError {
    #[error("mysql: {0}")]
    Store(#[from] StoreError),
    #[error("redis: {0}")]
    Index(#[from] crate::index::IndexError),
}

fn unreachable_store(check: &'static str, err: DoctorError) -> Finding {
    Finding {
        check,
        verdict: Verdict::Fail,
        summary: format!("could not check: {err}"),
        count: 0,
        ids: Vec::new(),
        fix: Some("check that the stores answer (tickler's mysql.url, redis.url)".to_owned()),
    }
}
