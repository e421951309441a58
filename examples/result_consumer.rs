//! A consumer that does each job's work and reports the outcome on the
//! results topic: the sketch in docs/results.md, whole, compiled by
//! `cargo test`. Against the local services (scripts/services):
//!
//! ```sh
//! cargo run --example result_consumer -- tickler.demo
//! ```
//!
//! It reads the topic given with the group `result-consumer-example` and
//! reports to `tickler.results`; a payload that is not JSON fails for good,
//! anything else succeeds.

use std::fmt;
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::json;

/// What the business's work says went wrong, and whether trying again
/// later may help.
#[derive(Debug)]
struct WorkError {
    message: String,
    transient: bool,
}

impl WorkError {
    fn is_transient(&self) -> bool {
        self.transient
    }
}

impl fmt::Display for WorkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The business's work. Here: the payload must be JSON.
async fn handle(payload: &[u8]) -> Result<(), WorkError> {
    serde_json::from_slice::<serde_json::Value>(payload)
        .map(|_| ())
        .map_err(|e| WorkError {
            message: format!("payload is not JSON: {e}"),
            transient: false,
        })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let topic = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tickler.demo".to_owned());
    let brokers =
        std::env::var("TICKLER_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".to_owned());
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "result-consumer-example")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[&topic])?;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()?;
    loop {
        // docs/results.md shows the loop's body.
        let message = consumer.recv().await?;
        let header = |name: &str| {
            message
                .headers()?
                .iter()
                .find(|h| h.key == name)
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        };
        let (Some(job_id), Some(attempt)) = (header("tickler-job-id"), header("tickler-attempt"))
        else {
            consumer.commit_message(&message, CommitMode::Async)?; // not from tickler
            continue;
        };
        let (id, attempt) = (job_id.parse::<u64>()?, attempt.parse::<u32>()?);
        let report = match handle(message.payload().unwrap_or_default()).await {
            Ok(()) => json!({"job_id": id, "attempt": attempt, "outcome": "ok"}),
            Err(e) if e.is_transient() => {
                json!({"job_id": id, "attempt": attempt, "outcome": "retry", "error": e.to_string()})
            }
            Err(e) => {
                json!({"job_id": id, "attempt": attempt, "outcome": "failed", "error": e.to_string()})
            }
        }
        .to_string();
        // Keyed by job id, so a job's reports stay in order.
        let record = FutureRecord::to("tickler.results")
            .key(&job_id)
            .payload(&report);
        producer
            .send(record, Duration::from_secs(5))
            .await
            .map_err(|(e, _)| e)?;
        consumer.commit_message(&message, CommitMode::Async)?;
    }
}
