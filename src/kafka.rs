//! Kafka client settings and topic administration shared by the dispatcher,
//! the results role, the demo and the tests.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureProducer;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use rdkafka::{Offset, TopicPartitionList};

/// The settings every tickler Kafka client shares.
pub fn client_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", "tickler")
        // Quiet librdkafka's own logging; errors reach us through results.
        .set("log_level", "3");
    config
}

/// The idempotent producer (acks=all) tickler produces every record with;
/// `options` (the `kafka_options` setting) are applied last.
pub fn producer_create(
    brokers: &str,
    options: &BTreeMap<String, String>,
    linger_ms: u64,
    message_timeout_ms: u64,
) -> Result<FutureProducer, KafkaError> {
    let mut client = client_config(brokers);
    client
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", linger_ms.to_string())
        .set("message.timeout.ms", message_timeout_ms.to_string());
    for (key, value) in options {
        client.set(key, value);
    }
    client.create()
}

/// Creates `topic` with `partitions` partitions unless it exists already.
/// Brokers such as tansu do not create topics on first use.
pub async fn topic_ensure(brokers: &str, topic: &str, partitions: i32) -> Result<(), KafkaError> {
    let admin: AdminClient<DefaultClientContext> = client_config(brokers).create()?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin.create_topics([&new_topic], &options).await?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code)),
        }
    }
    Ok(())
}

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
    let consumer: StreamConsumer = client_config(brokers)
        .set(
            "group.id",
            format!("tickler-reader-{}", rand::random::<u64>()),
        )
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
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
