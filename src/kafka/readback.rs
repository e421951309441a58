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

/// What a read-back found.
#[derive(Debug, Default)]
pub struct ReadBack {
    /// Where each sought (id, attempt) was found.
    pub found: HashMap<(JobId, u32), Landed>,
    /// Topics that could not be read to their end (in time, or at all):
    /// nothing may be concluded about their records.
    pub unread: HashSet<String>,
}

/// Reads every partition of each sought record's topic from the offset of
/// its earliest `since` (less [`READBACK_SKEW`]) to the partition's end, and
/// says where each sought (id, attempt) was found. A topic the broker does
/// not have holds none of them. Each topic has `wait` to be read; one that
/// cannot be (the broker down, no READ permission, too much to read) is
/// named in `unread`, and the others are concluded all the same. Fails only
/// when no reader can be made.
pub async fn records_find(
    brokers: &str,
    options: &BTreeMap<String, String>,
    sought: &[Sought],
    wait: Duration,
) -> Result<ReadBack, KafkaError> {
    let mut by_topic: BTreeMap<String, (DateTime<Utc>, HashSet<(JobId, u32)>)> = BTreeMap::new();
    for s in sought {
        let entry = by_topic
            .entry(s.topic.clone())
            .or_insert_with(|| (s.since, HashSet::new()));
        entry.0 = entry.0.min(s.since);
        entry.1.insert((s.id, s.attempt));
    }
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
        for (topic, (since, wanted)) in by_topic {
            let deadline = (Instant::now() + wait).min(pass_deadline);
            if Instant::now() >= pass_deadline {
                read.unread.insert(topic);
                continue;
            }
            if let Err(err) =
                topic_read(&consumer, &topic, since, &wanted, deadline, &mut read.found)
            {
                tracing::warn!(topic, error = %err, "cannot read a topic back");
                read.unread.insert(topic);
            }
        }
        read
    })
    .await
    .map_err(|_| KafkaError::Canceled)
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
) -> Result<(), KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), left(deadline))?;
    let Some(meta) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(());
    };
    match meta.error().map(RDKafkaErrorCode::from) {
        None => {}
        // Never created, or deleted: no consumer can read a record there.
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            return Ok(())
        }
        Some(code) => return Err(KafkaError::MetadataFetch(code)),
    }
    let partitions: Vec<i32> = meta.partitions().iter().map(|p| p.id()).collect();
    if partitions.is_empty() {
        return Ok(());
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
        return Ok(());
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
    Ok(())
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
