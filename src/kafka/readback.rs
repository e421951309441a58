//! Reading topics back to settle claims in doubt: a record handed to the
//! broker whose fate tickler does not know (its instance died or paused, the
//! send timed out, the mark was lost) is looked for on its topic, by its
//! `tickler-job-id` and `tickler-attempt` headers, once nothing more of it
//! can arrive. Found, the job was produced there; not found, it was not, and
//! is produced again.
//!
//! The reader uses `isolation.level = read_uncommitted`: tickler's records
//! are never transactional, so every consumer sees them as this reader does,
//! and it is not held back at the last stable offset by another producer's
//! open transaction on the same topic.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::job::{self, JobId};

/// How much earlier than its claim a record's timestamp may read: records
/// carry the database's time as their timestamp, but a broker that stamps
/// them itself (tansu; `LogAppendTime` topics) uses its own clock.
pub const READBACK_SKEW: Duration = Duration::from_secs(60);

/// How long after a sought record's claim a topic the broker says it does
/// not have is taken to hold none of it. Sooner, the answer may be the
/// metadata of a broker just restarted or a controller moving, and the
/// claim waits for a later pass: concluding "absent" from it would produce
/// the job again (a duplicate) or let a cancel answer `cancelled` for a
/// record that is there.
pub const MISSING_TOPIC_GRACE: Duration = Duration::from_secs(60);

/// A record looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sought {
    pub id: JobId,
    pub attempt: u32,
    pub topic: String,
    /// No record of it can be older than this.
    pub since: DateTime<Utc>,
}

/// Where a sought record was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    pub partition: i32,
    pub offset: i64,
    /// Its `tickler-dispatched-at` (None: unreadable).
    pub dispatched_at: Option<DateTime<Utc>>,
}

/// Doubts whose claim is older than this are read apart from the recent
/// ones of their topic: a row set `dispatching` by hand months ago makes
/// its topic a long read, which must not keep the recent doubts of the same
/// topic from being settled.
pub const READBACK_RECENT: Duration = Duration::from_secs(600);

/// What a read-back found.
#[derive(Debug, Default)]
pub struct ReadBack {
    /// Where each sought (id, attempt) was found.
    pub found: HashMap<(JobId, u32), Landed>,
    /// Sought records whose topic could not be read to its end this time
    /// (failed, or no time left in the pass): nothing may be concluded
    /// about them.
    pub unread: HashSet<(JobId, u32)>,
    /// Topics whose read failed, with why (not those the pass had no time
    /// left for).
    pub failed: BTreeMap<String, String>,
}

/// The records sought on one topic since one instant.
struct ReadGroup {
    topic: String,
    since: DateTime<Utc>,
    wanted: HashSet<(JobId, u32)>,
}

/// `sought` grouped by topic — the recent claims of a topic apart from its
/// old ones ([`READBACK_RECENT`]) — recent groups first, each in the order
/// its topic first appears in `sought`.
fn read_groups(sought: &[Sought], now: DateTime<Utc>) -> Vec<ReadGroup> {
    let recent_from = now - chrono::Duration::from_std(READBACK_RECENT).unwrap_or_default();
    let mut groups: Vec<(bool, ReadGroup)> = Vec::new();
    for s in sought {
        let old = s.since < recent_from;
        match groups
            .iter_mut()
            .find(|(o, g)| *o == old && g.topic == s.topic)
        {
            Some((_, group)) => {
                group.since = group.since.min(s.since);
                group.wanted.insert((s.id, s.attempt));
            }
            None => groups.push((
                old,
                ReadGroup {
                    topic: s.topic.clone(),
                    since: s.since,
                    wanted: HashSet::from([(s.id, s.attempt)]),
                },
            )),
        }
    }
    // Stable: recent groups keep their order, then the old ones.
    groups.sort_by_key(|(old, _)| *old);
    groups.into_iter().map(|(_, group)| group).collect()
}

/// Reads every partition of each sought record's topic from the offset of
/// its earliest `since` (less [`READBACK_SKEW`]) to the partition's end, and
/// says where each sought (id, attempt) was found. A topic the broker says
/// it does not have holds none of them once [`MISSING_TOPIC_GRACE`] has
/// passed since their claim; before, it is unread. Each topic has `wait` to
/// be read; one that
/// cannot be (the broker down, no READ permission, too much to read) is
/// named in `unread`, and the others are concluded all the same. Fails only
/// when no reader can be made.
pub async fn records_find(
    brokers: &str,
    options: &BTreeMap<String, String>,
    sought: &[Sought],
    wait: Duration,
) -> Result<ReadBack, KafkaError> {
    let groups = read_groups(sought, Utc::now());
    let consumer: BaseConsumer = super::reader_config(brokers, options, "tickler-readback")
        .set("enable.partition.eof", "true")
        // tickler's records are never transactional: read_committed would
        // stop at the last stable offset of someone else's open
        // transaction, before records of ours that are already visible.
        .set("isolation.level", "read_uncommitted")
        // tansu answers a fetch only when this expires.
        .set("fetch.wait.max.ms", "20")
        .create()?;
    tokio::task::spawn_blocking(move || {
        let mut read = ReadBack::default();
        // A pass reads for at most three topics' time; the rest wait for
        // the next pass.
        let pass_deadline = Instant::now() + wait * 3;
        for group in groups {
            let ReadGroup {
                topic,
                since,
                wanted,
            } = group;
            if Instant::now() >= pass_deadline || read.failed.contains_key(&topic) {
                read.unread.extend(wanted);
                continue;
            }
            let deadline = (Instant::now() + wait).min(pass_deadline);
            match topic_read(&consumer, &topic, since, &wanted, deadline, &mut read.found) {
                Ok(TopicRead::Read) => {}
                Ok(TopicRead::Missing) if missing_is_conclusive(since, Utc::now()) => {
                    tracing::info!(topic, "a topic read back is missing: none of its claims in doubt was produced there");
                }
                Ok(TopicRead::Missing) => {
                    read.unread.extend(wanted);
                    read.failed.insert(
                        topic,
                        format!(
                            "the broker says the topic does not exist; absence is concluded {} s after the claim",
                            MISSING_TOPIC_GRACE.as_secs()
                        ),
                    );
                }
                Err(err) => {
                    read.unread.extend(wanted);
                    read.failed.insert(topic, err.to_string());
                }
            }
        }
        read
    })
    .await
    .map_err(|_| KafkaError::Canceled)
}

/// Whether a topic found missing holds none of the records claimed at or
/// after `since`: only once the answer has had [`MISSING_TOPIC_GRACE`] to
/// be corrected.
fn missing_is_conclusive(since: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    chrono::Duration::from_std(MISSING_TOPIC_GRACE).is_ok_and(|grace| since + grace <= now)
}

/// What reading a topic found.
#[derive(Debug, PartialEq, Eq)]
enum TopicRead {
    /// Read to its end: what was sought there is in `found`.
    Read,
    /// The broker says it has no such topic, or no partition of it.
    Missing,
}

fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Long because it is one consumer's life: assign, seek, read to the
/// deadline or the end, match, close.
fn topic_read(
    consumer: &BaseConsumer,
    topic: &str,
    since: DateTime<Utc>,
    wanted: &HashSet<(JobId, u32)>,
    deadline: Instant,
    found: &mut HashMap<(JobId, u32), Landed>,
) -> Result<TopicRead, KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), left(deadline))?;
    let Some(meta) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(TopicRead::Missing);
    };
    match meta.error().map(RDKafkaErrorCode::from) {
        None => {}
        // Never created, or deleted — or a passing answer: the caller
        // decides.
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            return Ok(TopicRead::Missing)
        }
        Some(code) => return Err(KafkaError::MetadataFetch(code)),
    }
    let partitions: Vec<i32> = meta.partitions().iter().map(|p| p.id()).collect();
    if partitions.is_empty() {
        return Ok(TopicRead::Missing);
    }
    let from_ms = (since - chrono::Duration::from_std(READBACK_SKEW).unwrap_or_default())
        .timestamp_millis()
        .max(0);
    let mut by_time = TopicPartitionList::new();
    for partition in &partitions {
        by_time.add_partition_offset(topic, *partition, Offset::Offset(from_ms))?;
    }
    let starts = consumer.offsets_for_times(by_time, left(deadline))?;
    let mut assignment = TopicPartitionList::new();
    let mut open: HashSet<i32> = HashSet::new();
    for partition in &partitions {
        let (low, high) = consumer.fetch_watermarks(topic, *partition, left(deadline))?;
        let start = match starts.find_partition(topic, *partition).map(|p| p.offset()) {
            Some(Offset::Offset(at)) => at.max(low),
            // No record as recent: nothing to read.
            Some(Offset::End) => high,
            _ => low,
        };
        if start < high {
            assignment.add_partition_offset(topic, *partition, Offset::Offset(start))?;
            open.insert(*partition);
        }
    }
    if open.is_empty() {
        return Ok(TopicRead::Read);
    }
    consumer.assign(&assignment)?;
    while !open.is_empty() {
        if Instant::now() >= deadline {
            let _ = consumer.unassign();
            return Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::OperationTimedOut,
            ));
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                if let Some(key) = record_identity(&message) {
                    if wanted.contains(&key) {
                        found.insert(
                            key,
                            Landed {
                                partition: message.partition(),
                                offset: message.offset(),
                                dispatched_at: header(&message, job::HEADER_DISPATCHED_AT)
                                    .and_then(|ms| ms.parse::<i64>().ok())
                                    .and_then(|ms| Utc.timestamp_millis_opt(ms).single()),
                            },
                        );
                    }
                }
            }
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                open.remove(&partition);
            }
            Some(Err(err)) => {
                let _ = consumer.unassign();
                return Err(err);
            }
            None => {}
        }
    }
    let _ = consumer.unassign();
    Ok(TopicRead::Read)
}

fn header<'a>(message: &'a rdkafka::message::BorrowedMessage<'_>, name: &str) -> Option<&'a str> {
    super::header_value(message, name).and_then(|v| std::str::from_utf8(v).ok())
}

/// The (job id, attempt) a record of tickler's carries.
fn record_identity(message: &rdkafka::message::BorrowedMessage<'_>) -> Option<(JobId, u32)> {
    let id = header(message, job::HEADER_JOB_ID)?.parse().ok()?;
    let attempt = header(message, job::HEADER_ATTEMPT)?.parse().ok()?;
    Some((id, attempt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sought(id: JobId, topic: &str, since: DateTime<Utc>) -> Sought {
        Sought {
            id,
            attempt: 1,
            topic: topic.to_owned(),
            since,
        }
    }

    #[test]
    fn a_topics_old_doubts_are_read_apart_and_after_every_recent_one() {
        let now = Utc.timestamp_millis_opt(1_800_000_000_000).unwrap();
        let old = now - chrono::Duration::days(90);
        let groups = read_groups(
            &[
                sought(1, "b", old),
                sought(2, "b", now),
                sought(3, "a", now - chrono::Duration::seconds(5)),
                sought(4, "b", now - chrono::Duration::seconds(9)),
                sought(5, "a", old),
            ],
            now,
        );
        let shape: Vec<(&str, DateTime<Utc>, usize)> = groups
            .iter()
            .map(|g| (g.topic.as_str(), g.since, g.wanted.len()))
            .collect();
        assert_eq!(
            shape,
            [
                ("b", now - chrono::Duration::seconds(9), 2),
                ("a", now - chrono::Duration::seconds(5), 1),
                ("b", old, 1),
                ("a", old, 1),
            ]
        );
    }

    #[test]
    fn a_missing_topic_proves_absence_only_after_the_grace() {
        let since = Utc.timestamp_millis_opt(1_800_000_000_000).unwrap();
        let grace = chrono::Duration::from_std(MISSING_TOPIC_GRACE).unwrap();
        assert!(!missing_is_conclusive(since, since));
        assert!(!missing_is_conclusive(
            since,
            since + grace - chrono::Duration::milliseconds(1)
        ));
        assert!(missing_is_conclusive(since, since + grace));
    }
}
