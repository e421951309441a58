//! One job's record to Kafka (the builder is [`kafka::Record`]), and what
//! a failed send means for the job.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;

use super::DispatcherConfig;
use crate::domain::job::{self, Job, JobId};
use crate::kafka::{self, Fault, KafkaError, Producer, Record};

pub(super) fn producer_create(config: &DispatcherConfig) -> Result<Producer, KafkaError> {
    Producer::create(
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
        /// The broker's own answer (at delivery), which a topic missing
        /// drops from the cached metadata; false for a refusal made from
        /// that metadata, which has nothing to add to it, and whose settle
        /// may come after a newer fetch that found the topic.
        from_broker: bool,
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
    /// Not sent: its payload no longer matches its topic's schema (where it
    /// fails). Held, pending, until released; attempt uncounted.
    Held(String),
}

/// What a send's error means for the job: only the record's own fault
/// ([`kafka::fault_of`]) counts as an attempt.
pub(super) fn kafka_failure(err: &KafkaError) -> Failure {
    let message = err.to_string();
    match kafka::fault_of(err) {
        Fault::Refused(reason) => Failure::Refused {
            reason,
            message,
            from_broker: true,
        },
        Fault::TimedOut => Failure::TimedOut(message),
        Fault::Broker => Failure::Broker(message),
    }
}

/// What became of one record.
pub(super) struct Sent {
    pub(super) id: JobId,
    /// The claim it was sent under.
    pub(super) token: u64,
    pub(super) topic: String,
    pub(super) scheduled: DateTime<Utc>,
    /// The end of its flexible window, if it has one.
    pub(super) window_end: Option<DateTime<Utc>>,
    pub(super) attempt: u32,
    /// The database's time when it was sent (its `tickler-dispatched-at`).
    pub(super) dispatched_at: DateTime<Utc>,
    /// When to try again if the broker failed it (Redis's clock, ms).
    pub(super) retry_at_ms: i64,
    pub(super) result: Result<(i32, i64), Failure>,
}

pub(super) type Delivery = BoxFuture<'static, Sent>;

/// Puts one job's record in the producer's queue. The claim is bounded, so
/// the local queue is never full for long; a full queue fails the send (and
/// the job is retried) at once.
pub(super) fn enqueue(
    producer: &Producer,
    job: &Job,
    dispatched_at_ms: i64,
) -> Result<kafka::Delivery, KafkaError> {
    let mut record = Record::of_job(&job.topic, job, job.attempt, 3);
    // The creating request's trace context, unless the job's own headers
    // carry one.
    if let Some(trace_parent) = &job.trace_parent {
        if !job.headers.contains_key(job::HEADER_TRACEPARENT) {
            record = record.header(job::HEADER_TRACEPARENT, trace_parent.as_bytes());
        }
    }
    let mut number = itoa::Buffer::new();
    if let Some(schedule_id) = job.schedule_id {
        record = record.header(
            job::HEADER_SCHEDULE_ID,
            number.format(schedule_id).as_bytes(),
        );
    }
    // Stamped with the database's time, as its `tickler-dispatched-at`:
    // reading the topic back to settle a claim in doubt starts from the
    // claim's time on the same clock.
    let record = record
        .header(
            job::HEADER_DISPATCHED_AT,
            number.format(dispatched_at_ms).as_bytes(),
        )
        .timestamp_ms(dispatched_at_ms);
    producer.send(record)
}
