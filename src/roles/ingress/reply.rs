//! The answers: one record on the reply topic for every request, saying
//! what became of it, and the wait for the broker to acknowledge them.
//!
//! A pass's replies share one tally of their delivery reports
//! ([`Tallied`]), where a future each would cost a channel, two
//! allocations and a wake-up per reply: on two cores, per-request CPU is
//! what the ingress keeps up with the batch API by (docs/benchmarks.md,
//! "Scheduling through Kafka").

use std::fmt;

use chrono::{DateTime, Datelike, Timelike, Utc};
use serde::{Serialize, Serializer};

use super::pass::{Batch, RequestOutcome, Taken};
use super::request::HEADER_CORRELATION_ID;
use crate::domain::job::{self, Status};
use crate::kafka::{Producer, Record, Tallied};
use crate::metrics;

/// On a reply: what became of the request.
pub const HEADER_OUTCOME: &str = "tickler-outcome";
/// On a reply: where the request was read.
pub const HEADER_REQUEST_TOPIC: &str = "tickler-request-topic";
pub const HEADER_REQUEST_PARTITION: &str = "tickler-request-partition";
pub const HEADER_REQUEST_OFFSET: &str = "tickler-request-offset";

/// The reply topic and the producer that answers on it.
pub struct Replies {
    producer: Producer,
    topic: String,
}

impl Replies {
    pub fn new(producer: Producer, topic: String) -> Replies {
        Replies { producer, topic }
    }

    /// Answers every record of `batch` and waits for the broker's
    /// acknowledgements. Returns (acknowledged, failed). Every reply ends
    /// acknowledged or failed within `message.timeout.ms`: librdkafka
    /// reports each record it was given.
    pub async fn send(&self, batch: &Batch, outcomes: &[RequestOutcome]) -> (usize, usize) {
        let n = batch.records.len().min(outcomes.len());
        let tally = Tallied::new(n);
        let mut body = Vec::with_capacity(320);
        for (record, outcome) in batch.records.iter().zip(outcomes) {
            body.clear();
            reply_body_write(&mut body, record, outcome);
            let mut reply = reply_record(&self.topic, record, outcome).value(&body);
            if let Some(key) = &record.key {
                reply = reply.key(key.as_slice());
            }
            if let Err(err) = self.producer.send_tallied(reply, &tally) {
                tracing::warn!(error = %err, "cannot queue an ingress reply");
            }
        }
        let (acknowledged, failed) = tally.wait().await;
        if failed > 0 {
            metrics::ingress_replies_failed(failed);
        }
        (acknowledged, failed)
    }
}

/// A reply to `topic`, with its headers (copied as each is added).
fn reply_record<'a>(topic: &'a str, record: &Taken, outcome: &RequestOutcome) -> Record<'a> {
    let mut number = itoa::Buffer::new();
    let mut reply = Record::to(topic, 6)
        .header(HEADER_OUTCOME, outcome.name().as_bytes())
        .header(HEADER_REQUEST_TOPIC, record.topic.as_bytes())
        .header(
            HEADER_REQUEST_PARTITION,
            number.format(record.partition).as_bytes(),
        )
        .header(
            HEADER_REQUEST_OFFSET,
            number.format(record.offset).as_bytes(),
        );
    if let Some(correlation) = record.header(HEADER_CORRELATION_ID) {
        reply = reply.header(HEADER_CORRELATION_ID, correlation);
    }
    if let Some(job) = outcome.job() {
        reply = reply.header(job::HEADER_JOB_ID, number.format(job.id).as_bytes());
    }
    reply
}

/// The value of a reply record.
#[derive(Debug, Serialize)]
struct ReplyBody<'a> {
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<ReplyJob<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ReplyError>,
    request: ReplyRequest<'a>,
}

#[derive(Debug, Serialize)]
struct ReplyJob<'a> {
    id: u64,
    topic: &'a str,
    key: Option<&'a str>,
    status: Status,
    run_at: RunAt,
    version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    kafka: Option<ReplyPosition>,
}

#[derive(Debug, Serialize)]
struct ReplyPosition {
    partition: i32,
    offset: i64,
}

#[derive(Debug, Serialize)]
struct ReplyError {
    code: &'static str,
    message: String,
}

#[derive(Debug, Serialize)]
struct ReplyRequest<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
}

/// A job's time as the API writes it ([`job::time_format`]), written
/// straight into the reply.
#[derive(Debug)]
struct RunAt(DateTime<Utc>);

impl fmt::Display for RunAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.0;
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            at.year(),
            at.month(),
            at.day(),
            at.hour(),
            at.minute(),
            at.second(),
            at.timestamp_subsec_millis() % 1000
        )
    }
}

impl Serialize for RunAt {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Writes the value of the reply to `record` into `out`.
fn reply_body_write(out: &mut Vec<u8>, record: &Taken, outcome: &RequestOutcome) {
    let body = ReplyBody {
        outcome: outcome.name(),
        job: outcome.job().map(|job| ReplyJob {
            id: job.id,
            topic: &job.topic,
            key: job.key.as_deref(),
            status: job.status,
            run_at: RunAt(job.schedule_time),
            version: job.version,
            kafka: match (job.kafka_partition, job.kafka_offset) {
                (Some(partition), Some(offset)) => Some(ReplyPosition { partition, offset }),
                _ => None,
            },
        }),
        error: match outcome {
            RequestOutcome::Refused(err) => Some(ReplyError {
                code: err.code(),
                message: err.to_string(),
            }),
            _ => None,
        },
        request: ReplyRequest {
            topic: &record.topic,
            partition: record.partition,
            offset: record.offset,
        },
    };
    // Plain strings and numbers into a Vec: this cannot fail.
    let _ = serde_json::to_writer(out, &body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::ingress::RequestError;

    #[test]
    fn a_reply_says_the_outcome_the_job_and_where_the_request_was_read() {
        let refused = RequestOutcome::Refused(RequestError::NotFound {
            topic: "orders".to_owned(),
            key: "k".to_owned(),
        });
        let mut out = Vec::new();
        reply_body_write(&mut out, &Taken::at("req.a", 1, 7), &refused);
        let body: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(body["outcome"], "error");
        assert_eq!(body["error"]["code"], "not_found");
        assert_eq!(body["request"]["partition"], 1);
        assert_eq!(body["request"]["offset"], 7);
        assert!(body.get("job").is_none());
    }

    #[test]
    fn a_replys_time_is_written_as_the_api_writes_it() {
        for at in [
            "2026-11-26T01:02:03.456Z",
            "1970-01-01T00:00:00.000Z",
            "2030-12-31T23:59:59.999Z",
            "9999-12-31T23:59:59.999Z",
            "2026-02-03T04:05:06.007Z",
        ] {
            let time = DateTime::parse_from_rfc3339(at)
                .unwrap()
                .with_timezone(&Utc);
            assert_eq!(RunAt(time).to_string(), job::time_format(time));
            assert_eq!(RunAt(time).to_string(), at);
        }
    }
}
