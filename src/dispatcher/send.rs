//! One record to Kafka: the job's record as it is produced, and what a
//! failed send means for the job.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;

use super::DispatcherConfig;
use crate::job::{self, Job, JobId};
use crate::kafka;

pub(super) fn producer_create(config: &DispatcherConfig) -> Result<FutureProducer, KafkaError> {
    kafka::producer_create(
        &config.brokers,
        &config.kafka_options,
        config.linger_ms,
        config.message_timeout_ms,
    )
}

/// Why a record did not reach the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Refused for the job's own sake: a failed attempt of the job.
    Refused {
        /// Stable word, the `reason` label of `tickler_produce_refused_total`.
        reason: &'static str,
        message: String,
    },
    /// Not acknowledged in time: the topic may have vanished (checked
    /// against fresh metadata) or the broker is slow.
    TimedOut(String),
    /// The broker's trouble, not the job's, reported for a record handed
    /// to it (a delivery failure): it may have been persisted all the same,
    /// so the claim is put in doubt and settled by reading the topic back.
    Broker(String),
    /// Never handed to the broker (the producer's queue refused it, or the
    /// dispatcher withheld it: its lease ran out, its topic was paused):
    /// tried again, attempt uncounted.
    Unsent(String),
    /// Not sent: the topic was missing from metadata more than a second
    /// old, which is being fetched again. Tried again, attempt uncounted,
    /// and no sign of trouble with the broker.
    Unchecked(String),
}

/// Sorts a Kafka error into the job's fault or the broker's. Only errors
/// that say something about this record or its topic count against the job;
/// anything else (transport, leadership, timeouts, a full queue) would
/// bury every job during a broker outage.
pub fn failure_classify(code: Option<RDKafkaErrorCode>, message: String) -> Failure {
    use RDKafkaErrorCode as C;
    let reason = match code {
        Some(C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition) => "unknown_topic",
        Some(C::TopicAuthorizationFailed) => "not_authorized",
        Some(
            C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::MessageBatchTooLarge
            | C::InvalidRecord
            | C::InvalidMessage
            | C::InvalidTopic
            | C::PolicyViolation,
        ) => "invalid_record",
        Some(C::MessageTimedOut) => return Failure::TimedOut(message),
        _ => return Failure::Broker(message),
    };
    Failure::Refused { reason, message }
}

/// What became of one record.
pub(super) struct Sent {
    pub(super) id: JobId,
    /// The claim it was sent under.
    pub(super) token: u64,
    pub(super) topic: String,
    pub(super) scheduled: DateTime<Utc>,
    pub(super) attempt: u32,
    /// The database's time when it was sent (its `tickler-dispatched-at`).
    pub(super) dispatched_at: DateTime<Utc>,
    /// When to try again if the broker failed it (Redis's clock, ms).
    pub(super) retry_ms: i64,
    pub(super) result: Result<(i32, i64), Failure>,
}

pub(super) type Delivery = BoxFuture<'static, Sent>;

pub(super) fn kafka_failure(err: &KafkaError) -> Failure {
    failure_classify(err.rdkafka_error_code(), err.to_string())
}

/// Puts one job's record in the producer's queue. The claim is bounded, so
/// the local queue is never full for long; a full queue fails the send (and
/// the job is retried) at once.
pub(super) fn enqueue(
    producer: &FutureProducer,
    job: &Job,
    dispatched_ms: i64,
) -> Result<DeliveryFuture, KafkaError> {
    let id = job.id.to_string();
    let attempt = job.attempt.to_string();
    let scheduled = job.schedule_time.timestamp_millis().to_string();
    let dispatched = dispatched_ms.to_string();
    let mut headers = OwnedHeaders::new_with_capacity(job.headers.len() + 6);
    for (name, value) in &job.headers {
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_bytes()),
        });
    }
    // The creating request's trace context, unless the job's own headers
    // carry one.
    if let Some(trace_parent) = &job.trace_parent {
        if !job.headers.contains_key(job::HEADER_TRACEPARENT) {
            headers = headers.insert(Header {
                key: job::HEADER_TRACEPARENT,
                value: Some(trace_parent.as_bytes()),
            });
        }
    }
    if let Some(schedule_id) = job.schedule_id {
        headers = headers.insert(Header {
            key: job::HEADER_SCHEDULE_ID,
            value: Some(schedule_id.to_string().as_bytes()),
        });
    }
    for (name, value) in [
        (job::HEADER_JOB_ID, &id),
        (job::HEADER_ATTEMPT, &attempt),
        (job::HEADER_SCHEDULED_AT, &scheduled),
        (job::HEADER_DISPATCHED_AT, &dispatched),
    ] {
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_bytes()),
        });
    }
    let key = job.record_key();
    // Stamped with the database's time, as its `tickler-dispatched-at`:
    // reading the topic back to settle a claim in doubt starts from the
    // claim's time on the same clock.
    let record = FutureRecord::to(&job.topic)
        .key(&key)
        .payload(&job.payload)
        .headers(headers)
        .timestamp(dispatched_ms);
    producer.send_result(record).map_err(|(err, _)| err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_jobs_own_faults_count_as_attempts() {
        let refused = |code| match failure_classify(Some(code), String::new()) {
            Failure::Refused { reason, .. } => Some(reason),
            _ => None,
        };
        for (code, reason) in [
            (RDKafkaErrorCode::UnknownTopicOrPartition, "unknown_topic"),
            (RDKafkaErrorCode::UnknownTopic, "unknown_topic"),
            (RDKafkaErrorCode::MessageSizeTooLarge, "invalid_record"),
            (RDKafkaErrorCode::TopicAuthorizationFailed, "not_authorized"),
        ] {
            assert_eq!(refused(code), Some(reason), "{code:?}");
        }
        // The broker's own trouble never buries a job.
        for code in [
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::QueueFull,
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::RequestTimedOut,
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
        ] {
            assert!(
                matches!(
                    failure_classify(Some(code), String::new()),
                    Failure::Broker(_)
                ),
                "{code:?}"
            );
        }
        assert!(matches!(
            failure_classify(Some(RDKafkaErrorCode::MessageTimedOut), String::new()),
            Failure::TimedOut(_)
        ));
        assert!(matches!(
            failure_classify(None, String::new()),
            Failure::Broker(_)
        ));
    }
}
