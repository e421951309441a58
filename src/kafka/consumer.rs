//! The consumer of tickler's groups (the results role, the ingress): it
//! commits by hand, once what it read is in MySQL.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

/// A consumer that commits a group's offsets: a member of the group,
/// subscribed to its topics ([`GroupConsumer::subscribe`]), or one that
/// reads the partitions it is given ([`GroupConsumer::by_hand`]).
pub struct GroupConsumer {
    inner: StreamConsumer,
}

impl GroupConsumer {
    /// A member of `group` that commits by hand and, on a group's first
    /// reading, starts from the earliest record ([`super::group_config`]),
    /// subscribed to `topics` (which should exist: a consumer subscribed to
    /// a topic that does not may not see it until a later metadata refresh,
    /// a minute or more on). Fails on settings librdkafka refuses.
    pub fn subscribe(
        brokers: &str,
        options: &BTreeMap<String, String>,
        group: &str,
        fetch_wait_ms: u32,
        topics: &[&str],
    ) -> Result<GroupConsumer, KafkaError> {
        let inner: StreamConsumer =
            super::group_config(brokers, options, group, fetch_wait_ms).create()?;
        inner.subscribe(topics)?;
        Ok(GroupConsumer { inner })
    }

    /// A consumer that reads only the partitions it is given
    /// ([`GroupConsumer::partitions_add`]), each from `group`'s committed
    /// offset (or the earliest record), and commits to `group` by hand. It
    /// never joins the group: who reads what is decided outside Kafka, so a
    /// process restarted in place reads again at once, where a member of a
    /// group waits out its predecessor's session. Kafka accepts its commits
    /// while the group has no members. Fails on settings librdkafka refuses.
    pub fn by_hand(
        brokers: &str,
        options: &BTreeMap<String, String>,
        group: &str,
        fetch_wait_ms: u32,
    ) -> Result<GroupConsumer, KafkaError> {
        let inner: StreamConsumer =
            super::group_config(brokers, options, group, fetch_wait_ms).create()?;
        Ok(GroupConsumer { inner })
    }

    /// Starts reading `partitions`, each from its committed offset.
    pub fn partitions_add(&self, partitions: &[(String, i32)]) -> Result<(), KafkaError> {
        let mut list = TopicPartitionList::new();
        for (topic, partition) in partitions {
            list.add_partition_offset(topic, *partition, Offset::Stored)?;
        }
        self.inner.incremental_assign(&list)
    }

    /// Stops reading `partitions` (what was fetched of them and not yet
    /// received is dropped).
    pub fn partitions_remove(&self, partitions: &[(String, i32)]) -> Result<(), KafkaError> {
        let mut list = TopicPartitionList::new();
        for (topic, partition) in partitions {
            list.add_partition(topic, *partition);
        }
        self.inner.incremental_unassign(&list)
    }

    /// The partitions of `topics` the broker's metadata lists (a topic it
    /// does not have, none). Blocks for up to `timeout`: call it off the
    /// runtime's threads.
    pub fn partitions_of(
        &self,
        topics: &[String],
        timeout: Duration,
    ) -> Result<Vec<(String, i32)>, KafkaError> {
        let mut partitions = Vec::new();
        for topic in topics {
            let metadata = self.inner.fetch_metadata(Some(topic), timeout)?;
            for found in metadata.topics() {
                if found.error().is_some() {
                    continue;
                }
                for partition in found.partitions() {
                    partitions.push((found.name().to_owned(), partition.id()));
                }
            }
        }
        Ok(partitions)
    }

    /// The next record of the partitions this member is assigned.
    pub async fn recv(&self) -> Result<Received<'_>, KafkaError> {
        self.inner.recv().await.map(Received)
    }

    /// Commits, for each (topic, partition), the record after the last one
    /// read (`last`), without waiting for the broker: a lost commit only
    /// means reading records again.
    pub fn commit<'t>(
        &self,
        last: impl IntoIterator<Item = ((&'t str, i32), i64)>,
    ) -> Result<(), KafkaError> {
        let mut offsets = TopicPartitionList::new();
        for ((topic, partition), offset) in last {
            offsets.add_partition_offset(topic, partition, Offset::Offset(offset + 1))?;
        }
        self.inner.commit(&offsets, CommitMode::Async)
    }
}

/// A record read, borrowed from the consumer until dropped.
pub struct Received<'a>(BorrowedMessage<'a>);

impl Received<'_> {
    pub fn topic(&self) -> &str {
        self.0.topic()
    }

    pub fn partition(&self) -> i32 {
        self.0.partition()
    }

    pub fn offset(&self) -> i64 {
        self.0.offset()
    }

    pub fn key(&self) -> Option<&[u8]> {
        self.0.key()
    }

    pub fn payload(&self) -> Option<&[u8]> {
        self.0.payload()
    }

    /// Its timestamp, in ms since the epoch, when it has one.
    pub fn timestamp_ms(&self) -> Option<i64> {
        self.0.timestamp().to_millis()
    }

    /// Its headers, in order: (name, value).
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        super::headers_of(&self.0)
    }
}
