//! `tickler forecast`: what falls due, bucket by bucket, over a running
//! tickler's API (`GET /v1/forecast`): a table with a bar per bucket, or
//! the JSON answer.

use clap::Args;
use serde_json::Value;

use super::client::{Client, ClientError};
use super::jobs::{print_json, query, table_render};

/// Widest bar, in characters.
const BAR: usize = 40;

#[derive(Debug, Args)]
pub struct ForecastArgs {
    /// One topic (default: every topic the token may read).
    #[arg(long)]
    topic: Option<String>,
    /// Start, RFC 3339 (default: now).
    #[arg(long)]
    from: Option<String>,
    /// End, RFC 3339, exclusive (default: a day after --from).
    #[arg(long)]
    to: Option<String>,
    /// Bucket length: 1m, 15m, 1h, 1d… (default 1h).
    #[arg(long)]
    bucket: Option<String>,
    /// Show every bucket, not only those with something due.
    #[arg(long)]
    all: bool,
}

pub async fn run(client: &Client, args: ForecastArgs, json: bool) -> Result<(), ClientError> {
    let path = format!(
        "/v1/forecast{}",
        query(&[
            ("topic", args.topic),
            ("from", args.from),
            ("to", args.to),
            ("bucket", args.bucket),
        ])
    );
    let answer = client.get(&path).await?;
    if json {
        print_json(&answer);
        return Ok(());
    }
    print!("{}", table(&answer, args.all));
    Ok(())
}

/// The answer as people read it: per bucket the jobs, the projected
/// occurrences and a bar; then the topics' totals and peaks.
fn table(answer: &Value, all: bool) -> String {
    let count = |value: &Value, field: &str| value[field].as_u64().unwrap_or(0);
    let buckets = answer["buckets"].as_array().cloned().unwrap_or_default();
    let peak = buckets
        .iter()
        .map(|b| count(b, "jobs") + count(b, "projected"))
        .max()
        .unwrap_or(0)
        .max(1);
    let mut out = format!(
        "due from {} to {}, by {} ms (as of {})\n",
        answer["from"].as_str().unwrap_or(""),
        answer["to"].as_str().unwrap_or(""),
        count(answer, "bucket_ms"),
        answer["at"].as_str().unwrap_or("")
    );
    let rows: Vec<Vec<String>> = buckets
        .iter()
        .filter(|b| all || count(b, "jobs") + count(b, "projected") > 0)
        .map(|b| {
            let (jobs, projected) = (count(b, "jobs"), count(b, "projected"));
            let width = |n: u64| ((n as f64 / peak as f64) * BAR as f64).ceil() as usize;
            let bar = "#".repeat(width(jobs)) + &"+".repeat(width(projected));
            vec![
                b["at"].as_str().unwrap_or("").to_owned(),
                jobs.to_string(),
                projected.to_string(),
                bar,
            ]
        })
        .collect();
    out.push_str(&table_render(
        &["bucket", "jobs", "projected", "(# jobs, + projected)"],
        &rows,
    ));
    let topics: Vec<Vec<String>> = answer["topics"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            vec![
                t["topic"].as_str().unwrap_or("").to_owned(),
                count(t, "jobs").to_string(),
                count(t, "projected").to_string(),
                format!(
                    "{} at {}",
                    count(t, "peak"),
                    t["peak_at"].as_str().unwrap_or("-")
                ),
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&table_render(
        &["topic", "jobs", "projected", "busiest bucket"],
        &topics,
    ));
    if answer["projected_complete"] == Value::Bool(false) {
        out.push_str("\nnote: a cron schedule fires so often in this range that its projection stopped after 100,000 occurrences\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_busy_buckets_with_bars_and_the_topics_peaks() {
        let answer = serde_json::json!({
            "from": "2027-01-01T00:00:00.000Z", "to": "2027-01-01T03:00:00.000Z",
            "bucket_ms": 3_600_000, "at": "2026-12-31T12:00:00.000Z",
            "buckets": [
                {"at": "2027-01-01T00:00:00.000Z", "jobs": 40, "projected": 0},
                {"at": "2027-01-01T01:00:00.000Z", "jobs": 0, "projected": 0},
                {"at": "2027-01-01T02:00:00.000Z", "jobs": 10, "projected": 10},
            ],
            "topics": [{"topic": "billing", "jobs": 50, "projected": 10,
                        "peak_at": "2027-01-01T00:00:00.000Z", "peak": 40}],
            "projected_complete": true,
        });
        let shown = table(&answer, false);
        assert!(
            shown.contains(&format!(
                "2027-01-01T00:00:00.000Z  40    0          {}",
                "#".repeat(40)
            )),
            "{shown}"
        );
        assert!(
            !shown.contains("01:00:00"),
            "empty buckets left out: {shown}"
        );
        assert!(
            shown.contains(&format!("{}{}", "#".repeat(10), "+".repeat(10))),
            "{shown}"
        );
        assert!(
            shown.contains("billing  50    10         40 at 2027-01-01T00:00:00.000Z"),
            "{shown}"
        );
        assert!(table(&answer, true).contains("01:00:00"));
    }
}
