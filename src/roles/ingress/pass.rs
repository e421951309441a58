//! What a pass is made of: the ingress's settings, the records it took,
//! and what became of each request. Shared by the reading side (mod.rs)
//! and the writing side (write.rs).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::request::{RequestError, RequestRecord};
use crate::config::{Config, TopicCheck};
use crate::domain::job::{Job, Status};
use crate::domain::request::Limits;
use crate::kafka::Received;

/// How long a pass waits for more records already on their way.
pub const INGRESS_LINGER: Duration = Duration::from_millis(5);

/// Settings of the ingress.
#[derive(Debug, Clone)]
pub struct IngressConfig {
    pub brokers: String,
    /// Extra librdkafka properties, applied last.
    pub kafka_options: BTreeMap<String, String>,
    /// Request topics and the target-topic patterns each may schedule onto.
    pub topics: BTreeMap<String, Vec<String>>,
    pub reply_topic: Option<String>,
    pub group: String,
    /// Most records taken in one pass.
    pub batch: usize,
    pub linger: Duration,
    /// Partitions of a request or reply topic tickler has to create.
    pub partitions: i32,
    pub limits: Limits,
    pub topic_check: TopicCheck,
    pub window: Duration,
    pub linger_ms: u64,
    pub message_timeout_ms: u64,
}

impl IngressConfig {
    pub fn from_config(config: &Config) -> Self {
        let ingress = &config.ingress;
        IngressConfig {
            brokers: config.kafka.brokers.clone(),
            kafka_options: config.kafka.options.clone(),
            topics: ingress
                .topics
                .iter()
                .map(|(topic, settings)| (topic.clone(), settings.targets.clone()))
                .collect(),
            reply_topic: ingress.reply_topic.clone(),
            group: ingress.group.clone(),
            batch: ingress.batch,
            linger: INGRESS_LINGER,
            partitions: ingress.topic_partitions,
            limits: Limits {
                payload_max_bytes: config.jobs.payload_max_bytes,
                max_schedule_ahead_days: config.jobs.max_schedule_ahead_days,
            },
            topic_check: config.kafka.topic_check,
            window: config.window(),
            linger_ms: config.kafka.linger_ms,
            message_timeout_ms: config.kafka.message_timeout_ms,
        }
    }
}

/// A request record as taken from the broker.
#[derive(Debug, Clone)]
pub struct Taken {
    /// Shared by the records of a pass read from the same topic.
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// Names as bytes: one that is not UTF-8 is the request's error, not
    /// a reason to stop reading.
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub timestamp_ms: Option<i64>,
}

impl Taken {
    /// `topic`: the topic of the record taken before, reused when this
    /// one's is the same.
    pub(super) fn of(message: &Received<'_>, topic: Option<&Arc<str>>) -> Taken {
        let headers = message
            .headers()
            .map(|(name, value)| (name.to_vec(), value.map(<[u8]>::to_vec)))
            .collect();
        Taken {
            topic: match topic {
                Some(topic) if **topic == *message.topic() => topic.clone(),
                _ => message.topic().into(),
            },
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().map(<[u8]>::to_vec),
            headers,
            timestamp_ms: message.timestamp_ms(),
        }
    }

    pub(super) fn as_request(&self) -> RequestRecord<'_> {
        RequestRecord {
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: self
                .headers
                .iter()
                .map(|(name, value)| (name.as_slice(), value.as_deref()))
                .collect(),
            timestamp_ms: self.timestamp_ms,
        }
    }

    /// Where it was read, as `jobs.ingress_position` keeps it.
    pub fn position(&self) -> String {
        format!("{}/{}/{}", self.partition, self.offset, self.topic)
    }

    /// Whether a job last created or moved by the request at `stored` has
    /// seen this one already: the same partition of the same topic, at or
    /// after this offset. Such a request is being read again (a crash came
    /// before its offset was committed): applying it again could send the
    /// job back to an earlier request's time.
    pub fn seen_at(&self, stored: &str) -> bool {
        let mut parts = stored.splitn(3, '/');
        let (Some(partition), Some(offset), Some(topic)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        *topic == *self.topic
            && partition.parse() == Ok(self.partition)
            && offset
                .parse::<i64>()
                .is_ok_and(|offset| offset >= self.offset)
    }

    pub(super) fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name.as_bytes())
            .and_then(|(_, v)| v.as_deref())
    }
}

#[cfg(test)]
impl Taken {
    /// A record with no key, value or headers, read at `offset` of
    /// `partition` of `topic`.
    pub(super) fn at(topic: &str, partition: i32, offset: i64) -> Taken {
        Taken {
            topic: topic.into(),
            partition,
            offset,
            key: None,
            value: None,
            headers: Vec::new(),
            timestamp_ms: None,
        }
    }
}

/// The records of one pass, in the order they were read.
#[derive(Debug, Default)]
pub struct Batch {
    pub records: Vec<Taken>,
}

/// What became of one request.
#[derive(Debug, Clone)]
pub enum RequestOutcome {
    Created(Job),
    /// The job this (topic, key) holds is what the request asks for: a
    /// request sent or read again.
    Existing(Job),
    /// A pending job's time, payload or headers changed to the request's.
    Moved(Job),
    /// It will never be produced.
    Cancelled(Job),
    /// Produced already: its partition and offset say where.
    TooLate(Job),
    /// A dispatcher holds it this instant; send the request again.
    InFlight(Job),
    Refused(RequestError),
}

impl RequestOutcome {
    pub fn name(&self) -> &'static str {
        match self {
            RequestOutcome::Created(_) => "created",
            RequestOutcome::Existing(_) => "existing",
            RequestOutcome::Moved(_) => "moved",
            RequestOutcome::Cancelled(_) => "cancelled",
            RequestOutcome::TooLate(_) => "too_late",
            RequestOutcome::InFlight(_) => "in_flight",
            RequestOutcome::Refused(_) => "error",
        }
    }

    pub fn job(&self) -> Option<&Job> {
        match self {
            RequestOutcome::Created(job)
            | RequestOutcome::Existing(job)
            | RequestOutcome::Moved(job)
            | RequestOutcome::Cancelled(job)
            | RequestOutcome::TooLate(job)
            | RequestOutcome::InFlight(job) => Some(job),
            RequestOutcome::Refused(_) => None,
        }
    }

    /// What a job no longer pending says to a create, move or cancel.
    pub(super) fn of_settled(job: Job) -> RequestOutcome {
        match job.status {
            Status::Dispatched | Status::Succeeded | Status::Dead => RequestOutcome::TooLate(job),
            Status::Cancelled | Status::Expired => {
                RequestOutcome::Refused(RequestError::NotPending(format!(
                    "job {} is {}: its key cannot schedule again",
                    job.id, job.status
                )))
            }
            // Pending again a moment after it was not: a claim released.
            Status::Dispatching | Status::Pending => RequestOutcome::InFlight(job),
        }
    }
}
