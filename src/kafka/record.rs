//! The one record builder: every record tickler produces (a job's, a dead
//! letter, an ingress reply) is built here and sent with
//! [`super::Producer`].

use std::borrow::Cow;

use rdkafka::message::{Header, OwnedHeaders};

use crate::domain::job::{self, Job};

/// A record to produce. librdkafka copies the key, value and each header
/// as the record is queued.
pub struct Record<'a> {
    pub(super) topic: &'a str,
    pub(super) key: Option<Cow<'a, [u8]>>,
    pub(super) value: Option<&'a [u8]>,
    pub(super) headers: OwnedHeaders,
    pub(super) timestamp_ms: Option<i64>,
}

impl<'a> Record<'a> {
    /// An empty record to `topic`, with room for `headers` headers.
    pub fn to(topic: &'a str, headers: usize) -> Record<'a> {
        Record {
            topic,
            key: None,
            value: None,
            headers: OwnedHeaders::new_with_capacity(headers),
            timestamp_ms: None,
        }
    }

    /// `job`'s record to `topic`: its key (its id when it has none, so that
    /// the records of one job land on one partition), its payload, its own
    /// headers, and tickler's `tickler-job-id`, `tickler-attempt`
    /// (`attempt`) and `tickler-scheduled-at`. Room is kept for `more`
    /// headers.
    pub fn of_job(topic: &'a str, job: &'a Job, attempt: u32, more: usize) -> Record<'a> {
        let key = match &job.key {
            Some(key) => Cow::Borrowed(key.as_bytes()),
            None => Cow::Owned(job.id.to_string().into_bytes()),
        };
        let mut record = Record::to(topic, job.headers.len() + 3 + more);
        record.key = Some(key);
        record.value = Some(&job.payload);
        for (name, value) in &job.headers {
            record = record.header(name, value.as_bytes());
        }
        let mut number = itoa::Buffer::new();
        record
            .header(job::HEADER_JOB_ID, number.format(job.id).as_bytes())
            .header(job::HEADER_ATTEMPT, number.format(attempt).as_bytes())
            .header(
                job::HEADER_SCHEDULED_AT,
                number
                    .format(job.schedule_time.timestamp_millis())
                    .as_bytes(),
            )
    }

    pub fn key(mut self, key: &'a [u8]) -> Record<'a> {
        self.key = Some(Cow::Borrowed(key));
        self
    }

    pub fn value(mut self, value: &'a [u8]) -> Record<'a> {
        self.value = Some(value);
        self
    }

    /// The record's timestamp (CreateTime), in ms since the epoch.
    pub fn timestamp_ms(mut self, ms: i64) -> Record<'a> {
        self.timestamp_ms = Some(ms);
        self
    }

    /// Adds a header (copied at once).
    pub fn header(mut self, name: &str, value: &[u8]) -> Record<'a> {
        self.headers = self.headers.insert(Header {
            key: name,
            value: Some(value),
        });
        self
    }
}
