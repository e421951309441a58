//! Reading produced records back at the position the broker acknowledged
//! them at (#59): proof that a job's record is on its topic, not only that
//! a broker once said so. A broker can acknowledge and then lose a record
//! (an unclean leader election, `acks=1`, a topic deleted and made again);
//! tickler knows where each record should be and looks.
//!
//! One reader, many partitions at once: each partition is read from a
//! little before its earliest sought record (by time: a fetch that starts
//! inside a batch of records gets nothing from some brokers) to its latest,
//! and each sought offset is matched by its `tickler-job-id` and
//! `tickler-attempt` headers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

pub use crate::domain::delivery::Produced;
use crate::domain::job::{HEADER_ATTEMPT, HEADER_JOB_ID};

/// What reading a produced record back found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Its record is there.
    Found,
    /// It is not, and will not be: produce it again. Says what was found
    /// instead.
    Missing(String),
    /// It cannot be told, ever (retention removed the offset first, the row
    /// names no possible position): counted, not produced again.
    Unknowable(String),
    /// Not yet told (the broker did not answer, the reading ran out of
    /// time, the partition's end is not past it yet): asked again later.
    NotYet(String),
}

/// How long an acknowledged offset may stay at or past its partition's end
/// before the record is taken as lost (the topic made again, emptier): a
/// follower catching up under `acks=1` moves the end on within it.
pub const END_GRACE: Duration = Duration::from_secs(30);

/// How long after its record was produced a topic or partition the broker
/// says it lacks is taken to have lost it: sooner, the answer may be
/// metadata of a broker just restarted.
pub const MISSING_GRACE: Duration = Duration::from_secs(60);

/// How much earlier than the earliest sought record's time a partition is
/// read from: the record's timestamp is the claim's (the database's clock),
/// a little before it was marked.
const READ_BEFORE: Duration = Duration::from_secs(2);

/// Reads produced records back, one batch at a time.
pub struct Reader {
    consumer: BaseConsumer,
}

impl Reader {
    pub fn new(brokers: &str, options: &BTreeMap<String, String>) -> Result<Reader, KafkaError> {
        let consumer = super::reader_config(brokers, options, "tickler-verify")
            // tickler's records are never transactional (see readback).
            .set("isolation.level", "read_uncommitted")
            .set("fetch.wait.max.ms", "10")
            // Fetches large enough that a broker never ends one inside a
            // batch of records (tansu then answers the next fetch with the
            // batch after it, and the records between would look lost).
            .set("fetch.max.bytes", "104857600")
            .set("max.partition.fetch.bytes", "104857600")
            .set("receive.message.max.bytes", "209715200")
            .create()?;
        Ok(Reader { consumer })
    }

    /// What each of `batch` found, in `batch`'s order, within `wait`
    /// (blocking: run it off the async threads). `now` tells how long ago
    /// each was produced.
    pub fn check(&self, batch: &[Produced], now: DateTime<Utc>, wait: Duration) -> Vec<Verdict> {
        let deadline = Instant::now() + wait;
        let mut verdicts: Vec<Option<Verdict>> = vec![None; batch.len()];
        let mut reads: Vec<PartitionRead> = Vec::new();
        for ((topic, partition), members) in by_partition(batch) {
            let sought: Vec<(usize, &Produced)> = members.iter().map(|&i| (i, &batch[i])).collect();
            if partition < 0 {
                // No broker has it, and no record was ever there: a row
                // edited by hand, never a lost record.
                for (i, _) in sought {
                    verdicts[i] = Some(Verdict::Unknowable(format!(
                        "partition {partition} is no position"
                    )));
                }
                continue;
            }
            match self.bounds(&topic, partition, deadline) {
                Ok(Some((low, high))) => {
                    let read = PartitionRead::new(topic, partition, low, high);
                    read.judge_bounds(&sought, &mut verdicts);
                    if let Some(read) = read.with_sought(&sought, &verdicts) {
                        reads.push(read);
                    }
                }
                Ok(None) => {
                    for (i, produced) in sought {
                        verdicts[i] = Some(absent_partition(produced, now));
                    }
                }
                Err(err) => {
                    for (i, _) in sought {
                        verdicts[i] = Some(Verdict::NotYet(format!("watermarks: {err}")));
                    }
                }
            }
        }
        if !reads.is_empty() {
            if let Err(err) = self.read(&mut reads, batch, deadline) {
                tracing::debug!(error = %err, "verification read failed");
            }
            for read in &reads {
                read.conclude(batch, now, &mut verdicts);
            }
        }
        verdicts
            .into_iter()
            .map(|v| v.unwrap_or_else(|| Verdict::NotYet("not read".to_owned())))
            .collect()
    }

    /// A partition's low and high watermarks; None when the broker says it
    /// has no such topic or partition.
    fn bounds(
        &self,
        topic: &str,
        partition: i32,
        deadline: Instant,
    ) -> Result<Option<(i64, i64)>, KafkaError> {
        let metadata = self.consumer.fetch_metadata(Some(topic), left(deadline))?;
        let exists = metadata
            .topics()
            .iter()
            .any(|t| t.error().is_none() && t.partitions().iter().any(|p| p.id() == partition));
        if !exists {
            return Ok(None);
        }
        match self
            .consumer
            .fetch_watermarks(topic, partition, left(deadline))
        {
            Ok(bounds) => Ok(Some(bounds)),
            Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Reads every partition of `reads` from its start to its last sought
    /// offset, or until `deadline`.
    fn read(
        &self,
        reads: &mut [PartitionRead],
        batch: &[Produced],
        deadline: Instant,
    ) -> Result<(), KafkaError> {
        let mut by_time = TopicPartitionList::new();
        for read in reads.iter() {
            let since = read.earliest(batch) - chrono::Duration::from_std(READ_BEFORE).unwrap();
            by_time.add_partition_offset(
                &read.topic,
                read.partition,
                Offset::Offset(since.timestamp_millis()),
            )?;
        }
        let starts = self.consumer.offsets_for_times(by_time, left(deadline))?;
        let mut assignment = TopicPartitionList::new();
        for read in reads.iter_mut() {
            let by_time = starts
                .find_partition(&read.topic, read.partition)
                .and_then(|p| match p.offset() {
                    Offset::Offset(at) => Some(at),
                    _ => None,
                });
            read.start = read.start_at(by_time);
            assignment.add_partition_offset(
                &read.topic,
                read.partition,
                Offset::Offset(read.start),
            )?;
        }
        self.consumer.assign(&assignment)?;
        let mut open = reads.len();
        while open > 0 && Instant::now() < deadline {
            let message = match self.consumer.poll(Duration::from_millis(50)) {
                Some(Ok(message)) => message,
                Some(Err(KafkaError::PartitionEOF(_))) | None => continue,
                Some(Err(err)) => {
                    self.consumer.unassign()?;
                    return Err(err);
                }
            };
            let Some(read) = reads
                .iter_mut()
                .find(|r| r.partition == message.partition() && r.topic == message.topic())
            else {
                continue;
            };
            if read.take(&message) {
                open -= 1;
            }
        }
        self.consumer.unassign()?;
        Ok(())
    }
}

/// The members of `batch` (by index) grouped by topic and partition.
fn by_partition(batch: &[Produced]) -> BTreeMap<(String, i32), Vec<usize>> {
    let mut groups: BTreeMap<(String, i32), Vec<usize>> = BTreeMap::new();
    for (i, produced) in batch.iter().enumerate() {
        groups
            .entry((produced.topic.clone(), produced.partition))
            .or_default()
            .push(i);
    }
    groups
}

fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

fn age(produced: &Produced, now: DateTime<Utc>) -> Duration {
    (now - produced.dispatched_at).to_std().unwrap_or_default()
}

/// A record whose topic or partition the broker lacks: lost once the
/// answer has had [`MISSING_GRACE`] to be corrected.
fn absent_partition(produced: &Produced, now: DateTime<Utc>) -> Verdict {
    let what = format!(
        "the broker has no partition {} of {}",
        produced.partition, produced.topic
    );
    if age(produced, now) >= MISSING_GRACE {
        Verdict::Missing(what)
    } else {
        Verdict::NotYet(what)
    }
}

/// One partition's reading: its bounds, the offsets sought in it, and
/// what was found at them.
#[derive(Debug)]
struct PartitionRead {
    topic: String,
    partition: i32,
    low: i64,
    high: i64,
    /// Batch indexes of the records to read, by offset.
    sought: BTreeMap<i64, Vec<usize>>,
    /// Where the reading starts.
    start: i64,
    /// The (job id, attempt) headers of each sought offset read (None:
    /// a record without them).
    seen: HashMap<i64, Option<(String, String)>>,
    /// The offset of the last record read.
    reached: Option<i64>,
    /// Sought offsets the reading went past without a record: between two
    /// records read one after the other.
    skipped: BTreeSet<i64>,
}

impl PartitionRead {
    fn new(topic: String, partition: i32, low: i64, high: i64) -> Self {
        PartitionRead {
            topic,
            partition,
            low,
            high,
            sought: BTreeMap::new(),
            start: 0,
            seen: HashMap::new(),
            reached: None,
            skipped: BTreeSet::new(),
        }
    }

    /// Judges what the bounds alone tell: an offset no record can have, an
    /// offset retention removed. An offset at or past the partition's end
    /// is read all the same: some brokers (tansu) end a partition at the
    /// first record of its last batch, and deliver the rest with it.
    fn judge_bounds(&self, sought: &[(usize, &Produced)], verdicts: &mut [Option<Verdict>]) {
        for &(i, produced) in sought {
            let offset = produced.offset;
            verdicts[i] = if offset < 0 {
                Some(Verdict::Unknowable(format!(
                    "offset {offset} is no position"
                )))
            } else if offset < self.low {
                Some(Verdict::Unknowable(format!(
                    "the partition now starts at {}: retention removed offset {offset} before it was read",
                    self.low
                )))
            } else {
                None
            };
        }
    }

    /// The reading of the records the bounds left to read; None if none.
    fn with_sought(
        mut self,
        sought: &[(usize, &Produced)],
        verdicts: &[Option<Verdict>],
    ) -> Option<Self> {
        for &(i, produced) in sought {
            if verdicts[i].is_none() {
                self.sought.entry(produced.offset).or_default().push(i);
            }
        }
        (!self.sought.is_empty()).then_some(self)
    }

    fn first(&self) -> i64 {
        self.sought.keys().next().copied().unwrap_or(self.low)
    }

    fn last(&self) -> i64 {
        self.sought.keys().next_back().copied().unwrap_or(self.low)
    }

    fn earliest(&self, batch: &[Produced]) -> DateTime<Utc> {
        self.sought
            .values()
            .flatten()
            .map(|&i| batch[i].dispatched_at)
            .min()
            .unwrap_or_else(Utc::now)
    }

    /// Where to start: where the records of the earliest sought time begin,
    /// unless that is past the first sought offset (a broker stamping its
    /// own clock), and never before the partition's start.
    fn start_at(&self, by_time: Option<i64>) -> i64 {
        let first = self.first();
        by_time
            .filter(|&at| at >= 0 && at <= first)
            .unwrap_or(first)
            .max(self.low)
    }

    /// Takes one record read; true when the reading of this partition is
    /// done (its last sought offset reached).
    fn take(&mut self, message: &rdkafka::message::BorrowedMessage<'_>) -> bool {
        let offset = message.offset();
        // Before where this reading starts: a record an earlier reading of
        // the partition fetched, never one of this one's (a gap measured
        // from it would be no gap).
        if offset < self.start {
            return false;
        }
        let was_done = self.done();
        if self.sought.contains_key(&offset) {
            let header = |name| {
                super::header_value(message, name).map(|v| String::from_utf8_lossy(v).into_owned())
            };
            let ids = header(HEADER_JOB_ID).zip(header(HEADER_ATTEMPT));
            self.seen.insert(offset, ids);
        }
        // A gap only between two records read: before the first, the
        // reading may have started inside a batch (some brokers then
        // answer from the next batch).
        if let Some(previous) = self.reached.filter(|&r| offset > r + 1) {
            let gap: Vec<i64> = self
                .sought
                .range(previous + 1..offset)
                .map(|(&o, _)| o)
                .collect();
            self.skipped.extend(gap);
        }
        self.reached = Some(self.reached.map_or(offset, |r| r.max(offset)));
        !was_done && self.done()
    }

    fn done(&self) -> bool {
        self.reached.is_some_and(|r| r >= self.last())
    }

    /// The verdict of each sought record: found at its offset, another
    /// record there, none there (the reading passed it, or read the whole
    /// partition, which ends before it, [`END_GRACE`] after it was
    /// produced), or not told.
    fn conclude(&self, batch: &[Produced], now: DateTime<Utc>, verdicts: &mut [Option<Verdict>]) {
        // Read to the last record before the end (an empty partition is
        // never taken as read: a broker may not have delivered).
        let read_all = self.high > self.low && self.reached.is_some_and(|r| r >= self.high - 1);
        for (&offset, members) in &self.sought {
            for &i in members {
                let produced = &batch[i];
                verdicts[i] = Some(match self.seen.get(&offset) {
                    Some(Some((id, attempt)))
                        if *id == produced.id.to_string()
                            && *attempt == produced.attempt.to_string() =>
                    {
                        Verdict::Found
                    }
                    Some(Some((id, attempt))) => Verdict::Missing(format!(
                        "offset {offset} holds job {id} attempt {attempt}"
                    )),
                    Some(None) => Verdict::Missing(format!(
                        "offset {offset} holds a record that is not tickler's"
                    )),
                    None if self.reached.is_some_and(|r| r > offset) => Verdict::Missing(format!(
                        "no record at offset {offset}: the partition skips it"
                    )),
                    None if offset >= self.high && read_all && age(produced, now) >= END_GRACE => {
                        Verdict::Missing(format!(
                            "the partition ends at {}, before offset {offset}",
                            self.high
                        ))
                    }
                    None => Verdict::NotYet(format!(
                        "the reading from offset {} did not reach {offset} in time",
                        self.start
                    )),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::job::JobId;

    fn produced(id: JobId, offset: i64, ago_s: i64, now: DateTime<Utc>) -> Produced {
        Produced {
            id,
            attempt: 1,
            topic: "t".to_owned(),
            partition: 0,
            offset,
            dispatched_at: now - chrono::Duration::seconds(ago_s),
        }
    }

    #[test]
    fn bounds_alone_judge_only_what_no_read_can_change() {
        let now = Utc::now();
        let read = PartitionRead::new("t".to_owned(), 0, 10, 100);
        let batch = [
            produced(1, -3, 1, now),
            produced(2, 5, 1, now),
            produced(3, 100, 1, now),
            produced(4, 50, 1, now),
        ];
        let sought: Vec<(usize, &Produced)> = batch.iter().enumerate().collect();
        let mut verdicts = vec![None; batch.len()];
        read.judge_bounds(&sought, &mut verdicts);
        assert!(matches!(verdicts[0], Some(Verdict::Unknowable(_))));
        assert!(matches!(verdicts[1], Some(Verdict::Unknowable(_))));
        // At or past the end: read all the same (a broker's end may lag).
        assert_eq!(verdicts[2], None);
        assert_eq!(verdicts[3], None);
        let read = read.with_sought(&sought, &verdicts).unwrap();
        assert_eq!(
            read.sought.keys().copied().collect::<Vec<_>>(),
            vec![50, 100]
        );
    }

    #[test]
    fn past_the_end_is_missing_only_once_the_whole_partition_was_read_long_after() {
        let now = Utc::now();
        let batch = [produced(1, 120, 1, now), produced(2, 121, 40, now)];
        let verdicts_when = |reached: Option<i64>| {
            let mut read = PartitionRead::new("t".to_owned(), 0, 10, 100);
            read.sought.insert(120, vec![0]);
            read.sought.insert(121, vec![1]);
            read.reached = reached;
            let mut verdicts = vec![None; batch.len()];
            read.conclude(&batch, now, &mut verdicts);
            verdicts
        };
        // Read to the end: the recent one may still come, the old one not.
        let read_all = verdicts_when(Some(99));
        assert!(matches!(read_all[0], Some(Verdict::NotYet(_))));
        assert!(matches!(&read_all[1], Some(Verdict::Missing(m)) if m.contains("ends at 100")));
        // Not read to the end (or nothing delivered): nothing concluded.
        for reached in [Some(80), None] {
            let partly = verdicts_when(reached);
            assert!(partly.iter().all(|v| matches!(v, Some(Verdict::NotYet(_)))));
        }
    }

    #[test]
    fn a_reading_starts_by_time_but_never_after_the_first_sought_offset() {
        let mut read = PartitionRead::new("t".to_owned(), 0, 10, 100);
        read.sought.insert(40, vec![0]);
        read.sought.insert(60, vec![1]);
        assert_eq!(read.start_at(Some(35)), 35);
        assert_eq!(read.start_at(Some(45)), 40);
        assert_eq!(read.start_at(Some(-1)), 40);
        assert_eq!(read.start_at(None), 40);
        assert_eq!(read.start_at(Some(3)), 10);
    }

    #[test]
    fn what_was_read_decides_each_record() {
        let now = Utc::now();
        let batch = [
            produced(7, 40, 1, now),
            produced(8, 41, 1, now),
            produced(9, 42, 1, now),
            produced(10, 44, 1, now),
            produced(11, 50, 1, now),
        ];
        let mut read = PartitionRead::new("t".to_owned(), 0, 0, 100);
        for (i, p) in batch.iter().enumerate() {
            read.sought.entry(p.offset).or_default().push(i);
        }
        read.seen.insert(40, Some(("7".to_owned(), "1".to_owned())));
        read.seen
            .insert(41, Some(("99".to_owned(), "1".to_owned())));
        read.seen.insert(42, None);
        // 44 skipped: the reading went from 43 to 45.
        read.skipped.insert(44);
        read.reached = Some(45);
        let mut verdicts = vec![None; batch.len()];
        read.conclude(&batch, now, &mut verdicts);
        assert_eq!(verdicts[0], Some(Verdict::Found));
        assert!(matches!(&verdicts[1], Some(Verdict::Missing(m)) if m.contains("job 99")));
        assert!(matches!(&verdicts[2], Some(Verdict::Missing(m)) if m.contains("not tickler's")));
        assert!(matches!(&verdicts[3], Some(Verdict::Missing(m)) if m.contains("skips")));
        assert!(matches!(verdicts[4], Some(Verdict::NotYet(_))));
    }
}
