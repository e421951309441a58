//! The consumer of tickler's groups (the results role, the ingress): it
//! commits by hand, once what it read is in MySQL.

use std::collections::BTreeMap;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

/// A member of a consumer group, subscribed to its topics.
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
