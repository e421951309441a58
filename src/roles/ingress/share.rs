//! Who reads which request partition: the live instances of one
//! `ingress.group` (membership's rows) share the request topics'
//! partitions evenly, each partition's reader picked by a hash of (reader,
//! topic, partition), every instance computing the same answer from the
//! same list; and each reads its own partitions by hand (no Kafka
//! consumer group): a process killed and started again in place takes its
//! partitions back within its first membership round, where a group member
//! waits out its predecessor's session.
//!
//! Two instances whose views differ for a round may both read a partition
//! meanwhile. That costs replies, not correctness: a request read twice
//! finds its job, and the position its partition's last request left on
//! the job (`seen_at`) keeps an older request from undoing a later one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::kafka::GroupConsumer;
use crate::roles::membership::Ownership;

/// How often the request topics' partitions are looked up again (a topic
/// made later, partitions added).
pub const PARTITIONS_REFRESH: Duration = Duration::from_secs(10);
/// How long a metadata request may take.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// The partitions of `partitions` that `me` reads when `readers` (ids, `me`
/// among them or not) share them. Each partition, in (topic, partition)
/// order, goes to the first reader not yet holding its share (`partitions
/// / readers`, rounded up) in the partition's own order of readers, by a
/// hash of (reader, topic, partition): the shares are even, and a reader
/// joining or leaving moves few partitions besides its own.
pub fn partitions_mine(
    me: u64,
    readers: &[u64],
    partitions: &[(String, i32)],
) -> BTreeSet<(String, i32)> {
    let mut readers: Vec<u64> = readers.iter().copied().chain([me]).collect();
    readers.sort_unstable();
    readers.dedup();
    let mut partitions: Vec<&(String, i32)> = partitions.iter().collect();
    partitions.sort_unstable();
    partitions.dedup();
    let share = partitions.len().div_ceil(readers.len());
    let mut held = vec![0usize; readers.len()];
    let mut mine = BTreeSet::new();
    for partition @ (topic, number) in partitions {
        let Some((reader, _)) = readers
            .iter()
            .enumerate()
            .filter(|(i, _)| held[*i] < share)
            .max_by_key(|(_, reader)| (weight(**reader, topic, *number), **reader))
        else {
            break;
        };
        held[reader] += 1;
        if readers[reader] == me {
            mine.insert(partition.clone());
        }
    }
    mine
}

/// A hash every instance computes alike, whatever its build: FNV-1a over
/// the reader, the topic and the partition, then mixed (splitmix64's
/// finaliser) so that near inputs spread.
fn weight(reader: u64, topic: &str, partition: i32) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let bytes = reader
        .to_le_bytes()
        .into_iter()
        .chain(topic.bytes())
        .chain([0xff])
        .chain(partition.to_le_bytes());
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// Keeps the consumer reading this instance's partitions as membership
/// and the topics change, until cancelled.
pub struct Sharer {
    consumer: Arc<GroupConsumer>,
    topics: Vec<String>,
    ownership: watch::Receiver<Ownership>,
    /// The partitions the consumer reads.
    reading: BTreeSet<(String, i32)>,
    /// The request topics' partitions, as last looked up.
    partitions: Vec<(String, i32)>,
}

impl Sharer {
    pub fn new(
        consumer: Arc<GroupConsumer>,
        topics: Vec<String>,
        ownership: watch::Receiver<Ownership>,
    ) -> Sharer {
        Sharer {
            consumer,
            topics,
            ownership,
            reading: BTreeSet::new(),
            partitions: Vec::new(),
        }
    }

    pub async fn run(mut self, cancel: CancellationToken) {
        let mut refresh = tokio::time::interval(PARTITIONS_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = refresh.tick() => self.partitions_refresh().await,
                changed = self.ownership.changed() => {
                    if changed.is_err() {
                        // Membership is gone: the instance is stopping.
                        return;
                    }
                }
            }
            self.follow();
        }
    }

    /// Looks the request topics' partitions up again; keeps the last
    /// answer when the broker gives none.
    async fn partitions_refresh(&mut self) {
        let consumer = self.consumer.clone();
        let topics = self.topics.clone();
        let found =
            tokio::task::spawn_blocking(move || consumer.partitions_of(&topics, METADATA_TIMEOUT))
                .await;
        match found {
            Ok(Ok(partitions)) => self.partitions = partitions,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "cannot look up the request topics' partitions")
            }
            Err(err) => tracing::error!(error = %err, "the partitions lookup failed"),
        }
    }

    /// Reads the partitions that are this instance's now, and no others.
    fn follow(&mut self) {
        let (me, readers) = {
            let ownership = self.ownership.borrow();
            (ownership.instance, ownership.readers.clone())
        };
        // Before the first round, nobody knows who reads what: nothing.
        let Some(me) = me.filter(|_| !readers.is_empty()) else {
            return;
        };
        let mine = partitions_mine(me, &readers, &self.partitions);
        if mine == self.reading {
            return;
        }
        let gone: Vec<(String, i32)> = self.reading.difference(&mine).cloned().collect();
        let new: Vec<(String, i32)> = mine.difference(&self.reading).cloned().collect();
        if !gone.is_empty() {
            if let Err(err) = self.consumer.partitions_remove(&gone) {
                tracing::error!(error = %err, "cannot stop reading request partitions");
                return;
            }
            self.reading.retain(|p| !gone.contains(p));
        }
        if !new.is_empty() {
            if let Err(err) = self.consumer.partitions_add(&new) {
                tracing::error!(error = %err, "cannot read request partitions");
                return;
            }
            self.reading.extend(new.iter().cloned());
        }
        tracing::info!(
            readers = readers.len(),
            reading = self.reading.len(),
            of = self.partitions.len(),
            taken = new.len(),
            handed_on = gone.len(),
            "request partitions shared"
        );
        crate::metrics::ingress_partitions(self.reading.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions(topics: &[&str], n: i32) -> Vec<(String, i32)> {
        topics
            .iter()
            .flat_map(|topic| (0..n).map(move |p| (topic.to_string(), p)))
            .collect()
    }

    #[test]
    fn every_partition_has_exactly_one_reader_and_the_shares_are_even() {
        let all = partitions(&["req.a", "req.b", "req.c"], 16);
        let readers = [3, 8, 11, 40];
        let mut seen = BTreeSet::new();
        for me in readers {
            let mine = partitions_mine(me, &readers, &all);
            assert!(mine.len() == 12, "reader {me} reads {} of 48", mine.len());
            for p in mine {
                assert!(seen.insert(p), "read twice");
            }
        }
        assert_eq!(seen.len(), all.len(), "none unread");
    }

    #[test]
    fn a_reader_alone_reads_everything_even_before_it_is_listed() {
        let all = partitions(&["req.a"], 4);
        assert_eq!(partitions_mine(7, &[7], &all).len(), 4);
        assert_eq!(partitions_mine(7, &[], &all).len(), 4);
    }

    #[test]
    fn a_reader_leaving_moves_few_partitions_besides_its_own() {
        let all = partitions(&["req.a", "req.b"], 12);
        let before = [1, 2, 3];
        let after = [1, 3];
        let mut kept = 0;
        for me in after {
            let was = partitions_mine(me, &before, &all);
            let now = partitions_mine(me, &after, &all);
            kept += was.intersection(&now).count();
            assert_eq!(now.len(), 12, "reader {me}");
        }
        // 16 were theirs before; a reshuffle would keep about half.
        assert!(kept >= 14, "the others kept {kept} of 16");
    }

    #[test]
    fn the_weights_are_the_same_in_every_build() {
        // Fixed values: instances of two builds must agree on the shares.
        assert_eq!(weight(1, "req.a", 0), weight(1, "req.a", 0));
        assert_ne!(weight(1, "req.a", 0), weight(2, "req.a", 0));
        assert_ne!(weight(1, "req.a", 0), weight(1, "req.a", 1));
        assert_ne!(weight(1, "req.a1", 0), weight(1, "req.a", 1));
        assert_eq!(weight(1, "req.a", 0), 5_666_331_730_601_078_451);
    }
}
