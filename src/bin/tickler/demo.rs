//! The README's demonstration: schedules a few jobs seconds ahead through a
//! running tickler's API, then reads them back from Kafka as they arrive and
//! prints each with its lateness (arrival minus scheduled time).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{bail, Context};
use chrono::Utc;
use clap::Args;
use rdkafka::message::Message;
use rdkafka::Offset;
use serde_json::json;

use tickler::config::Config;
use tickler::domain::job::{HEADER_JOB_ID, HEADER_SCHEDULED_AT};
use tickler::kafka;
use tickler::kafka::tail::header;

/// `tickler demo`'s arguments.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How many jobs to schedule.
    #[arg(long, default_value_t = 5)]
    pub jobs: u32,
    /// Topic to schedule them on (created if missing).
    #[arg(long, default_value = "tickler.demo")]
    pub topic: String,
    /// API token secret (tickler token create ... --scope write).
    #[arg(long, env = "TICKLER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Long because it is the demonstration's script: create the topic,
/// schedule, read back, print.
pub async fn run(
    config: &Config,
    topic: &str,
    jobs: u32,
    token: Option<&str>,
) -> anyhow::Result<()> {
    kafka::topic_ensure_with(&config.kafka.brokers, &config.kafka.options, topic, 1)
        .await
        .with_context(|| format!("creating topic {topic}"))?;
    let consumer = kafka::tail::consumer_assigned(&config.kafka.brokers, topic, Offset::End)?;

    let base = format!("http://{}", config.api.addr);
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = token {
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}")
                .parse()
                .context("TICKLER_TOKEN is not a valid header value")?,
        );
    }
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .build()?;
    let mut expected = BTreeSet::new();
    let run = Utc::now().timestamp_millis();
    for n in 1..=jobs {
        let delay_ms = 1000 * u64::from(n);
        let body = json!({
            "topic": topic,
            "key": format!("demo-{run}-{n}"),
            "payload": {"hello": "world", "n": n},
            "headers": {"source": "tickler demo"},
            "delay_ms": delay_ms,
        });
        let response = http
            .post(format!("{base}/v1/jobs"))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("is tickler serving on {base}?"))?;
        let status = response.status();
        let job: serde_json::Value = response.json().await?;
        if !status.is_success() {
            bail!("tickler refused the job: {status} {job}");
        }
        println!(
            "scheduled job {:>6}  run_at {}  (in {} ms)",
            job["id"],
            job["run_at"].as_str().unwrap_or("?"),
            delay_ms
        );
        expected.insert(job["id"].to_string());
    }

    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(jobs) + 15);
    while !expected.is_empty() {
        let message = tokio::time::timeout_at(deadline, consumer.recv())
            .await
            .context("timed out waiting for the jobs to arrive on Kafka")??;
        let arrived_ms = Utc::now().timestamp_millis();
        let (Some(id), Some(scheduled)) = (
            header(&message, HEADER_JOB_ID),
            header(&message, HEADER_SCHEDULED_AT),
        ) else {
            continue;
        };
        let scheduled_at_ms: i64 = scheduled.parse().unwrap_or(arrived_ms);
        expected.remove(&id);
        println!(
            "arrived   job {:>6}  partition {} offset {:<6} lateness {:>4} ms  payload {}",
            id,
            message.partition(),
            message.offset(),
            arrived_ms - scheduled_at_ms,
            String::from_utf8_lossy(message.payload().unwrap_or_default()),
        );
    }
    println!("all {jobs} jobs arrived");
    Ok(())
}
