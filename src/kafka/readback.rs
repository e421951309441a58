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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, Timestamp};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::domain::job::{self, JobId};

/// How much earlier than its claim a record's timestamp may read when
/// nothing better is known: records carry the database's time as their
/// timestamp, but a broker that stamps them itself (`LogAppendTime` topics)
/// uses its own clock.
pub const READBACK_SKEW: Duration = Duration::from_secs(60);

/// The margin kept on top of what the topic's newest record says of its
/// clock (see [`skew_of`]): the dispatcher's reading of the database's
/// clock, and a broker clock that drifted since.
pub const READBACK_SKEW_KNOWN: Duration = Duration::from_secs(2);

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
    /// Of those, the topics whose reading ran out of time and goes on
    /// where it stopped next pass: not failures to back off from.
    pub resuming: BTreeSet<String>,
}

/// Where readings that ran out of time stopped, so that the next pass goes
/// on from there rather than start over (a topic too long to read in one
/// pass's share is then read in several). Kept by the reconciler between
/// passes; a reading resumes only for the same topic and start, seeking
/// no record it did not seek then (one it had passed would be missed).
#[derive(Debug, Default)]
pub struct Resume {
    stopped: HashMap<(String, i64), Stopped>,
}

#[derive(Debug)]
struct Stopped {
    /// The next offset to read in each partition still open.
    next: HashMap<i32, i64>,
    /// Where each partition ended when the reading began.
    ends: HashMap<i32, i64>,
    wanted: HashSet<(JobId, u32)>,
    found: HashMap<(JobId, u32), Landed>,
}

impl Resume {
    /// How many readings wait to go on.
    pub fn len(&self) -> usize {
        self.stopped.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stopped.is_empty()
    }
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
/// its earliest `since` (less the topic's skew, see [`skew_of`]) to where
/// the partition ended when the reading began, and says where each sought
/// (id, attempt) was found. A topic the broker says it does not have holds
/// none of them once [`MISSING_TOPIC_GRACE`] has passed since their claim;
/// before, it is unread. Each topic has `wait` to be read; one that cannot
/// be (the broker down, no READ permission) is named in `unread` and
/// `failed`, and the others are concluded all the same. One with too much
/// to read stops where `wait` ran out, and the returned [`Resume`] says
/// where: given back next pass, the reading goes on from there. Fails only
/// when no reader can be made.
///
/// Long because it is one blocking read, group by group: a reader made, every
/// partition assigned from its offset, polled to its end or the deadline, and
/// where it stopped kept for the next pass.
pub async fn records_find(
    brokers: &str,
    options: &BTreeMap<String, String>,
    sought: &[Sought],
    wait: Duration,
    resume: Resume,
) -> Result<(ReadBack, Resume), KafkaError> {
    let groups = read_groups(sought, Utc::now());
    let mut config = super::reader_config(brokers, options, "tickler-readback");
    config
        .set("enable.partition.eof", "true")
        // tickler's records are never transactional: read_committed would
        // stop at the last stable offset of someone else's open
        // transaction, before records of ours that are already visible.
        .set("isolation.level", "read_uncommitted")
        // tansu answers a fetch only when this expires.
        .set("fetch.wait.max.ms", "5");
    // Fails here, not per topic, when no reader can be made at all.
    drop(config.create::<BaseConsumer>()?);
    tokio::task::spawn_blocking(move || {
        let mut read = ReadBack::default();
        let mut resume = resume;
        let mut resumed = Resume::default();
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
                // Where an earlier reading of it stopped is kept.
                let key = (topic, since.timestamp_millis());
                if let Some(stopped) = resume.stopped.remove(&key) {
                    resumed.stopped.insert(key, stopped);
                }
                read.unread.extend(wanted);
                continue;
            }
            let deadline = (Instant::now() + wait).min(pass_deadline);
            // Readers of their own for each topic: an event of another
            // assignment (an end of partition above all, which names only
            // the partition) must never reach this reading, where an end
            // of partition closes the partition; nor the newest record's
            // look (see `newest_record`).
            let readers = match (
                config.create::<BaseConsumer>(),
                config.create::<BaseConsumer>(),
            ) {
                (Ok(consumer), Ok(prober)) => (consumer, prober),
                (Err(err), _) | (_, Err(err)) => {
                    read.unread.extend(wanted);
                    read.failed.insert(topic, err.to_string());
                    continue;
                }
            };
            let readers = Readers {
                consumer: &readers.0,
                prober: &readers.1,
            };
            let key = (topic.clone(), since.timestamp_millis());
            let earlier = resume
                .stopped
                .remove(&key)
                .filter(|stopped| wanted.is_subset(&stopped.wanted));
            let reading = topic_read(readers, &topic, since, &wanted, deadline, earlier);
            match reading {
                Ok((TopicRead::Read, found)) => read.found.extend(found),
                Ok((TopicRead::Stopped(stopped), _)) => {
                    read.unread.extend(wanted);
                    read.failed.insert(
                        topic,
                        format!(
                            "too much to read in {} ms: the next pass goes on from where this one stopped",
                            wait.as_millis()
                        ),
                    );
                    read.resuming.insert(key.0.clone());
                    resumed.stopped.insert(key, stopped);
                }
                Ok((TopicRead::Missing, _)) if missing_is_conclusive(since, Utc::now()) => {
                    tracing::info!(topic, "a topic read back is missing: none of its claims in doubt was produced there");
                }
                Ok((TopicRead::Missing, _)) => {
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
        (read, resumed)
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
#[derive(Debug)]
enum TopicRead {
    /// Read to its end.
    Read,
    /// The broker says it has no such topic, or no partition of it.
    Missing,
    /// Out of time, stopped here: the next pass goes on.
    Stopped(Stopped),
}

fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// The reader of a topic's records, and the one that looks at its newest.
#[derive(Clone, Copy)]
struct Readers<'a> {
    consumer: &'a BaseConsumer,
    prober: &'a BaseConsumer,
}

/// Long because it is one consumer's life: assign (where the last pass
/// stopped, or by time), read to where each partition ended, match, close.
fn topic_read(
    readers: Readers<'_>,
    topic: &str,
    since: DateTime<Utc>,
    wanted: &HashSet<(JobId, u32)>,
    deadline: Instant,
    earlier: Option<Stopped>,
) -> Result<(TopicRead, HashMap<(JobId, u32), Landed>), KafkaError> {
    let consumer = readers.consumer;
    let began = Instant::now();
    let (mut found, ends, next) = match earlier {
        // Goes on where the last pass stopped, with what it had found.
        Some(stopped) => {
            let mut found = stopped.found;
            found.retain(|key, _| wanted.contains(key));
            (found, stopped.ends, stopped.next)
        }
        // Finding where to start gets a second at least, whatever is left
        // of `deadline`: a reading that could never start could never go
        // on either.
        None => match topic_start(
            readers,
            topic,
            since,
            deadline.max(Instant::now() + Duration::from_secs(1)),
        )? {
            Some((ends, next)) => (HashMap::new(), ends, next),
            None => return Ok((TopicRead::Missing, HashMap::new())),
        },
    };
    let mut next: HashMap<i32, i64> = next
        .into_iter()
        .filter(|(partition, at)| ends.get(partition).is_some_and(|end| at < end))
        .collect();
    if next.is_empty() {
        return Ok((TopicRead::Read, found));
    }
    let mut assignment = TopicPartitionList::new();
    for (partition, at) in &next {
        assignment.add_partition_offset(topic, *partition, Offset::Offset(*at))?;
    }
    let positioned_ms = began.elapsed().as_millis() as u64;
    let mut open: HashSet<i32> = next.keys().copied().collect();
    let mut records = 0u64;
    consumer.assign(&assignment)?;
    while !open.is_empty() {
        if Instant::now() >= deadline {
            let _ = consumer.unassign();
            next.retain(|partition, _| open.contains(partition));
            let stopped = Stopped {
                next,
                ends,
                wanted: wanted.clone(),
                found,
            };
            return Ok((TopicRead::Stopped(stopped), HashMap::new()));
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) if message.topic() == topic => {
                records += 1;
                let partition = message.partition();
                next.insert(partition, message.offset() + 1);
                if ends
                    .get(&partition)
                    .is_some_and(|end| message.offset() >= end - 1)
                {
                    open.remove(&partition);
                }
                landed_note(&message, wanted, &mut found);
            }
            Some(Ok(_)) => {}
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
    // What was fetched with the last records is read too: a broker whose
    // high watermark falls short of its last batch (tansu's ends at that
    // batch's first record) delivers the rest of the batch in the same
    // answer, maybe behind another partition's end.
    let drain_until = Instant::now() + Duration::from_millis(50);
    while Instant::now() < drain_until {
        match consumer.poll(Duration::ZERO) {
            Some(Ok(message)) if message.topic() == topic => {
                records += 1;
                landed_note(&message, wanted, &mut found);
            }
            Some(_) => {}
            None => break,
        }
    }
    let _ = consumer.unassign();
    tracing::debug!(
        topic,
        positioned_ms,
        read_ms = began.elapsed().as_millis() as u64,
        records,
        "topic read back"
    );
    Ok((TopicRead::Read, found))
}

/// Where a reading of `topic` for records claimed at or after `since`
/// starts in each partition, and where each partition ends now; None when
/// the broker says it has no such topic (or no partition of it).
#[allow(clippy::type_complexity)]
fn topic_start(
    readers: Readers<'_>,
    topic: &str,
    since: DateTime<Utc>,
    deadline: Instant,
) -> Result<Option<(HashMap<i32, i64>, HashMap<i32, i64>)>, KafkaError> {
    let consumer = readers.consumer;
    let metadata = consumer.fetch_metadata(Some(topic), left(deadline))?;
    let Some(meta) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    match meta.error().map(RDKafkaErrorCode::from) {
        None => {}
        // Never created, or deleted — or a passing answer: the caller
        // decides.
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            return Ok(None)
        }
        Some(code) => return Err(KafkaError::MetadataFetch(code)),
    }
    let partitions: Vec<i32> = meta.partitions().iter().map(|p| p.id()).collect();
    if partitions.is_empty() {
        return Ok(None);
    }
    let skew = skew_of(newest_record(readers.prober, topic, &partitions, deadline)?);
    let from_ms = (since - chrono::Duration::from_std(skew).unwrap_or_default())
        .timestamp_millis()
        .max(0);
    let mut by_time = TopicPartitionList::new();
    for partition in &partitions {
        by_time.add_partition_offset(topic, *partition, Offset::Offset(from_ms))?;
    }
    let starts = consumer.offsets_for_times(by_time, left(deadline))?;
    // Where each partition ended when the reading began: no record of a
    // claim whose quiet time is over lands after it, so the reading stops
    // there rather than chase what others produce meanwhile.
    let mut ends: HashMap<i32, i64> = HashMap::new();
    let mut next: HashMap<i32, i64> = HashMap::new();
    for partition in &partitions {
        let (low, high) = consumer.fetch_watermarks(topic, *partition, left(deadline))?;
        let start = match starts.find_partition(topic, *partition).map(|p| p.offset()) {
            Some(Offset::Offset(at)) => at.max(low),
            // No record as recent: nothing to read.
            Some(Offset::End) => high,
            _ => low,
        };
        tracing::debug!(
            topic,
            partition,
            low,
            high,
            start,
            skew_ms = skew.as_millis() as u64,
            "partition to read back"
        );
        ends.insert(*partition, high);
        next.insert(*partition, start);
    }
    Ok(Some((ends, next)))
}

/// Notes where `message` landed when it is one of the records sought.
fn landed_note(
    message: &rdkafka::message::BorrowedMessage<'_>,
    wanted: &HashSet<(JobId, u32)>,
    found: &mut HashMap<(JobId, u32), Landed>,
) {
    if let Some(key) = record_identity(message) {
        if wanted.contains(&key) {
            found.insert(
                key,
                Landed {
                    partition: message.partition(),
                    offset: message.offset(),
                    dispatched_at: header(message, job::HEADER_DISPATCHED_AT)
                        .and_then(|ms| ms.parse::<i64>().ok())
                        .and_then(|ms| Utc.timestamp_millis_opt(ms).single()),
                },
            );
        }
    }
}

/// What the newest record of a topic says of its timestamps: the
/// timestamp, and its `tickler-dispatched-at` (the database's time when it
/// was produced) when it is one of tickler's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Newest {
    timestamp: Timestamp,
    dispatched_at_ms: Option<i64>,
}

/// How many records back from a partition's end [`newest_record`] looks.
const PROBE_BACK: i64 = 1_000;

/// One of the newest records of the fullest partition of `topic` (at most
/// [`PROBE_BACK`] from its end), or None when every partition is empty (or
/// none came in time: the caller then reads as if nothing were known).
fn newest_record(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: &[i32],
    deadline: Instant,
) -> Result<Option<Newest>, KafkaError> {
    let mut fullest: Option<(i32, i64, i64)> = None;
    for partition in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, *partition, left(deadline))?;
        if high > low && fullest.is_none_or(|(_, l, h)| high - low > h - l) {
            fullest = Some((*partition, low, high));
        }
    }
    let Some((partition, low, high)) = fullest else {
        return Ok(None);
    };
    // Not at `high - 1` itself: tansu answers a fetch that starts inside a
    // multi-record batch with the batch after it (none, for the last), so
    // the look starts some records back and takes the first that comes.
    let from = (high - PROBE_BACK).max(low);
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, partition, Offset::Offset(from))?;
    consumer.assign(&assignment)?;
    // A second at most: this only spares reading a minute of the topic.
    let until = deadline.min(Instant::now() + Duration::from_secs(1));
    let mut newest = None;
    while newest.is_none() && Instant::now() < until {
        match consumer.poll(Duration::from_millis(100)) {
            // Only the record asked for: not one of an earlier topic's
            // assignment still queued.
            Some(Ok(message))
                if message.topic() == topic
                    && message.partition() == partition
                    && message.offset() >= from =>
            {
                newest = Some(Newest {
                    timestamp: message.timestamp(),
                    dispatched_at_ms: header(&message, job::HEADER_DISPATCHED_AT)
                        .and_then(|ms| ms.parse::<i64>().ok()),
                })
            }
            Some(Ok(_)) => {}
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(err)) => {
                let _ = consumer.unassign();
                return Err(err);
            }
        }
    }
    let _ = consumer.unassign();
    Ok(newest)
}

/// How far before a claim its records' timestamps may read. A topic whose
/// records keep the producer's timestamp (`CreateTime`, Kafka's default)
/// has the database's time on tickler's records: [`READBACK_SKEW_KNOWN`].
/// A broker that stamps records itself (`LogAppendTime`) shows its clock
/// against the database's on one of tickler's records; the reading starts
/// that much earlier as well. Without either, [`READBACK_SKEW`].
fn skew_of(newest: Option<Newest>) -> Duration {
    match newest {
        // An empty topic: nothing to read whatever the start.
        None => READBACK_SKEW_KNOWN,
        Some(Newest {
            timestamp: Timestamp::CreateTime(_),
            ..
        }) => READBACK_SKEW_KNOWN,
        Some(Newest {
            timestamp: Timestamp::LogAppendTime(stamped_ms),
            dispatched_at_ms: Some(dispatched_at_ms),
        }) => {
            let behind_ms = u64::try_from(dispatched_at_ms - stamped_ms).unwrap_or(0);
            Duration::from_millis(behind_ms) + READBACK_SKEW_KNOWN
        }
        Some(_) => READBACK_SKEW,
    }
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
    fn the_reading_starts_as_early_as_the_topics_clock_needs() {
        let create = |ms| Newest {
            timestamp: Timestamp::CreateTime(ms),
            dispatched_at_ms: None,
        };
        assert_eq!(skew_of(None), READBACK_SKEW_KNOWN);
        assert_eq!(skew_of(Some(create(5))), READBACK_SKEW_KNOWN);
        // A broker stamping 90 s behind the database: 90 s earlier.
        let behind = Newest {
            timestamp: Timestamp::LogAppendTime(1_000_000),
            dispatched_at_ms: Some(1_090_000),
        };
        assert_eq!(
            skew_of(Some(behind)),
            Duration::from_secs(90) + READBACK_SKEW_KNOWN
        );
        // Ahead of it: no later than the claim.
        let ahead = Newest {
            timestamp: Timestamp::LogAppendTime(1_090_000),
            dispatched_at_ms: Some(1_000_000),
        };
        assert_eq!(skew_of(Some(ahead)), READBACK_SKEW_KNOWN);
        // Stamped by the broker, not one of tickler's: the minute.
        let foreign = Newest {
            timestamp: Timestamp::LogAppendTime(1_000_000),
            dispatched_at_ms: None,
        };
        assert_eq!(skew_of(Some(foreign)), READBACK_SKEW);
        let unknown = Newest {
            timestamp: Timestamp::NotAvailable,
            dispatched_at_ms: Some(1),
        };
        assert_eq!(skew_of(Some(unknown)), READBACK_SKEW);
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
