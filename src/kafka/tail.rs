//! Reading a topic's records as they arrive, without a consumer group:
//! how `tickler demo` and `tickler bench` (and the tests, through testkit)
//! watch what tickler produced. No serving role uses it.

use std::time::Duration;

use rdkafka::config::FromClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Offset, TopicPartitionList};

use super::client_config;

/// A consumer reading every partition of `topic` from `offset`, without a
/// consumer group's rebalancing: for the demo, the benchmark and the tests.
/// The broker answers a fetch when `fetch.wait.max.ms` expires (tansu even
/// when data arrived earlier), so it is kept low: the lateness printed is
/// then tickler's, not the consumer's.
pub fn consumer_assigned(
    brokers: &str,
    topic: &str,
    offset: Offset,
) -> Result<StreamConsumer, KafkaError> {
    assigned(brokers, topic, offset)
}

/// [`consumer_assigned`] as a `BaseConsumer`, to poll on a thread of its
/// own (the benchmark's, so that its receive times do not wait for the
/// async runtime tickler runs on).
pub fn base_consumer_assigned(
    brokers: &str,
    topic: &str,
    offset: Offset,
) -> Result<BaseConsumer, KafkaError> {
    assigned(brokers, topic, offset)
}

fn assigned<C: Consumer + FromClientConfig>(
    brokers: &str,
    topic: &str,
    offset: Offset,
) -> Result<C, KafkaError> {
    let consumer: C = client_config(brokers)
        .set(
            "group.id",
            format!("tickler-reader-{}", rand::random::<u64>()),
        )
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
        // Fetches large enough that tansu never ends one inside a
        // multi-record batch: it answers the next fetch, which then starts
        // inside that batch, with the batch after it, and the records in
        // between are never read (a reader catching up after a burst
        // lost two records in 40,000 so).
        .set("fetch.max.bytes", "104857600")
        .set("max.partition.fetch.bytes", "104857600")
        .set("receive.message.max.bytes", "209715200")
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let mut assignment = TopicPartitionList::new();
    for t in metadata.topics() {
        for p in t.partitions() {
            assignment.add_partition_offset(topic, p.id(), offset)?;
        }
    }
    consumer.assign(&assignment)?;
    Ok(consumer)
}

/// The value of header `name` of a record, as text (the first, if it
/// repeats); None when absent.
pub fn header(message: &BorrowedMessage<'_>, name: &str) -> Option<String> {
    super::header_value(message, name).map(|v| String::from_utf8_lossy(v).into_owned())
}
