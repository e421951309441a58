//! The one producer tickler sends every record with — jobs, dead letters,
//! ingress replies — and what a failed send means.
//!
//! Idempotent, `acks=all`, with `kafka.options` applied last
//! ([`super::producer_config`]). Each record's delivery report arrives one
//! of two ways: a [`Delivery`] future of its own (the dispatcher and the
//! dead letters, which act on each record), or a count on a [`Tally`] a
//! group of records shares (the ingress's replies, which only wait for the
//! whole group: no channel, no allocation and no wake-up per record).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseRecord, DeliveryResult, Producer as _, ProducerContext, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::ClientContext;
use tokio::sync::{oneshot, Notify};

use super::record::Record;

/// Where a record landed: (partition, offset).
pub type Landed = (i32, i64);

/// The producer. Cheap to clone: clones share one librdkafka client.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<ThreadedProducer<Reports>>,
}

impl Producer {
    /// The producer of [`super::producer_config`]'s settings. Fails on
    /// settings librdkafka refuses.
    pub fn create(
        brokers: &str,
        options: &std::collections::BTreeMap<String, String>,
        linger_ms: u64,
        message_timeout_ms: u64,
    ) -> Result<Producer, KafkaError> {
        let config = super::producer_config(brokers, options, linger_ms, message_timeout_ms);
        Ok(Producer {
            inner: Arc::new(ThreadedProducer::from_config_and_context(&config, Reports)?),
        })
    }

    /// Puts `record` in the producer's queue; its delivery report comes
    /// through the returned future. Fails at once when the queue refuses it
    /// (full, or the record is invalid).
    pub fn send(&self, record: Record<'_>) -> Result<Delivery, KafkaError> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(record, Arc::new(Sink::One(tx)))?;
        Ok(Delivery(rx))
    }

    /// Puts `record` in the producer's queue; its delivery report is
    /// counted on `tally`. A record the queue refuses is counted failed at
    /// once, and its error returned.
    pub fn send_tallied(&self, record: Record<'_>, tally: &Tallied) -> Result<(), KafkaError> {
        match self.enqueue(record, tally.0.clone()) {
            Ok(()) => Ok(()),
            Err(err) => {
                if let Sink::Many(tally) = &*tally.0 {
                    tally.failed.fetch_add(1, Ordering::AcqRel);
                    tally.settle_one();
                }
                Err(err)
            }
        }
    }

    fn enqueue(&self, record: Record<'_>, sink: Arc<Sink>) -> Result<(), KafkaError> {
        let Record {
            topic,
            key,
            value,
            headers,
            timestamp_ms,
        } = record;
        let mut base: BaseRecord<'_, [u8], [u8], Arc<Sink>> =
            BaseRecord::with_opaque_to(topic, sink).headers(headers);
        if let Some(key) = &key {
            base = base.key(key.as_ref());
        }
        if let Some(value) = value {
            base = base.payload(value);
        }
        if let Some(ms) = timestamp_ms {
            base = base.timestamp(ms);
        }
        self.inner.send(base).map_err(|(err, _)| err)
    }

    /// The error librdkafka reports the producer fatally failed with, if
    /// it did: it must be replaced.
    pub fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.inner.client().fatal_error()
    }

    /// Waits up to `timeout` for every record queued to be reported.
    pub fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.inner.flush(Timeout::After(timeout))
    }
}

/// One record's delivery report: where it landed, or why not.
pub struct Delivery(oneshot::Receiver<Result<Landed, KafkaError>>);

impl Future for Delivery {
    type Output = Result<Landed, KafkaError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|reported| {
            // The producer was dropped with the record still queued.
            reported.unwrap_or(Err(KafkaError::Canceled))
        })
    }
}

/// The delivery reports of a group of records sent with
/// [`Producer::send_tallied`].
#[derive(Default)]
pub struct Tally {
    /// Records handed over and not yet reported.
    outstanding: AtomicUsize,
    acknowledged: AtomicUsize,
    failed: AtomicUsize,
    /// Woken when `outstanding` reaches zero (a permit is kept when nobody
    /// waits yet).
    done: Notify,
}

/// A [`Tally`] as the producer holds it, one per group.
#[derive(Clone)]
pub struct Tallied(Arc<Sink>);

impl Tallied {
    /// A tally for `n` records, counted before the first is handed over, so
    /// that a report cannot bring it to zero while records are still being
    /// handed over.
    pub fn new(n: usize) -> Tallied {
        let tally = Tally::default();
        tally.outstanding.store(n, Ordering::Release);
        if n == 0 {
            tally.done.notify_one();
        }
        Tallied(Arc::new(Sink::Many(tally)))
    }

    /// Waits until every record of the group is reported; returns
    /// (acknowledged, failed).
    pub async fn wait(&self) -> (usize, usize) {
        let Sink::Many(tally) = &*self.0 else {
            return (0, 0);
        };
        while tally.outstanding.load(Ordering::Acquire) > 0 {
            tally.done.notified().await;
        }
        (
            tally.acknowledged.load(Ordering::Acquire),
            tally.failed.load(Ordering::Acquire),
        )
    }
}

impl Tally {
    fn settle_one(&self) {
        if self.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.notify_one();
        }
    }
}

/// Where a record's delivery report goes.
enum Sink {
    /// To the future of that one record.
    One(oneshot::Sender<Result<Landed, KafkaError>>),
    /// Counted on its group's tally.
    Many(Tally),
}

/// Hands each delivery report to its record's [`Sink`].
struct Reports;

impl ClientContext for Reports {}

impl ProducerContext for Reports {
    type DeliveryOpaque = Arc<Sink>;

    fn delivery(&self, result: &DeliveryResult<'_>, sink: Arc<Sink>) {
        let report = match result {
            Ok(message) => Ok((message.partition(), message.offset())),
            Err((err, _)) => Err(err.clone()),
        };
        match &*sink {
            Sink::Many(tally) => {
                match &report {
                    Ok(_) => tally.acknowledged.fetch_add(1, Ordering::AcqRel),
                    Err(err) => {
                        tracing::warn!(error = %err, "a record was not delivered");
                        tally.failed.fetch_add(1, Ordering::AcqRel)
                    }
                };
                tally.settle_one();
            }
            Sink::One(_) => {
                // The only holder: each record's own sink goes to the
                // producer alone.
                if let Ok(Sink::One(tx)) = Arc::try_unwrap(sink) {
                    let _ = tx.send(report);
                }
            }
        }
    }
}

/// What a failed send says about the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Refused for the record's own sake (missing topic, too large, not
    /// authorised); the reason is a stable word, the `reason` label of
    /// `tickler_produce_refused_total`.
    Refused(&'static str),
    /// Not acknowledged within `message.timeout.ms`: the topic may have
    /// vanished, or the broker is slow.
    TimedOut,
    /// The broker's trouble, not the record's (transport, leadership, a
    /// full queue...).
    Broker,
}

/// Sorts a send's error into the record's fault or the broker's. Only
/// errors that say something about this record or its topic count against
/// it; anything else (transport, leadership, timeouts, a full queue) would
/// bury every job during a broker outage.
pub fn fault_of(err: &KafkaError) -> Fault {
    fault_of_code(err.rdkafka_error_code())
}

fn fault_of_code(code: Option<RDKafkaErrorCode>) -> Fault {
    use RDKafkaErrorCode as C;
    match code {
        Some(C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition) => {
            Fault::Refused("unknown_topic")
        }
        Some(C::TopicAuthorizationFailed) => Fault::Refused("not_authorized"),
        Some(
            C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::MessageBatchTooLarge
            | C::InvalidRecord
            | C::InvalidMessage
            | C::InvalidTopic
            | C::PolicyViolation,
        ) => Fault::Refused("invalid_record"),
        Some(C::MessageTimedOut) => Fault::TimedOut,
        _ => Fault::Broker,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_records_own_faults_are_refusals() {
        for (code, reason) in [
            (RDKafkaErrorCode::UnknownTopicOrPartition, "unknown_topic"),
            (RDKafkaErrorCode::UnknownTopic, "unknown_topic"),
            (RDKafkaErrorCode::MessageSizeTooLarge, "invalid_record"),
            (RDKafkaErrorCode::TopicAuthorizationFailed, "not_authorized"),
        ] {
            assert_eq!(
                fault_of_code(Some(code)),
                Fault::Refused(reason),
                "{code:?}"
            );
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
            assert_eq!(fault_of_code(Some(code)), Fault::Broker, "{code:?}");
        }
        assert_eq!(
            fault_of_code(Some(RDKafkaErrorCode::MessageTimedOut)),
            Fault::TimedOut
        );
        assert_eq!(fault_of_code(None), Fault::Broker);
    }

    #[tokio::test]
    async fn a_tally_of_nothing_is_done_at_once() {
        let tally = Tallied::new(0);
        assert_eq!(tally.wait().await, (0, 0));
    }
}
