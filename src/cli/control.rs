//! `tickler topics` and `tickler schedules`: pause, resume, pace and group
//! topics, set their payload schemas,
//! and manage recurring schedules, over a running tickler's API.

use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

use super::client::{Client, ClientError};
use super::jobs::{print_job, print_json, print_table, query, table_render, text};

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Topics that are paused or paced.
    List,
    /// One topic's controls.
    Get { topic: String },
    /// Stop producing the topic's jobs: due ones stay pending until resume.
    Pause { topic: String },
    /// Produce the topic's due jobs again (at its pace, if it has one).
    Resume { topic: String },
    /// Set the topic's pace in jobs per second across every instance, or
    /// `--clear` it (the configuration's applies again).
    Pace {
        topic: String,
        /// Jobs per second, at least 1.
        #[arg(required_unless_present = "clear")]
        max_per_second: Option<u32>,
        #[arg(long, conflicts_with = "max_per_second")]
        clear: bool,
    },
    /// Group the topic's jobs for fair dispatch by tenant: by a key prefix
    /// (`key::`) or a header's value (`header:tenant`), each group at most
    /// `--per-second` (across every instance); `--clear` removes both.
    Group {
        topic: String,
        /// `key:SEPARATOR`, `header:NAME` or `token` (the creating API token).
        #[arg(required_unless_present = "clear")]
        group_by: Option<String>,
        /// Each group's pace, jobs per second (at least 1).
        #[arg(long)]
        per_second: Option<u32>,
        #[arg(long, conflicts_with_all = ["group_by", "per_second"])]
        clear: bool,
    },
    /// Set the JSON Schema the topic's payloads must match (`--file`), or
    /// `--clear` it. Creates that do not match are refused; pending jobs
    /// that no longer match are held when due (`tickler jobs list --held`).
    Schema {
        topic: String,
        /// A file holding the JSON Schema.
        #[arg(long, required_unless_present = "clear")]
        file: Option<std::path::PathBuf>,
        #[arg(long, conflicts_with = "file")]
        clear: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// Schedules by id.
    List {
        #[arg(long)]
        topic: Option<String>,
        /// active, paused or ended.
        #[arg(long)]
        status: Option<String>,
    },
    /// One schedule, with its pending occurrences.
    Get { id: u64 },
    /// Create a recurring schedule: `--cron` (with `--time-zone`) or
    /// `--every-ms`.
    Create(CreateArgs),
    /// Create nothing more until resumed; pending occurrences not yet due
    /// are deleted.
    Pause { id: u64 },
    /// Go on from now (occurrences of the pause are not misfires).
    Resume { id: u64 },
    /// Delete a schedule; its pending occurrences are cancelled unless
    /// `--keep-occurrences`.
    Delete {
        id: u64,
        #[arg(long)]
        keep_occurrences: bool,
    },
    /// Every occurrence the schedule's timing expected in an interval, and
    /// what became of it: produced (partition/offset), paused, skipped by
    /// its misfire policy, cancelled, expired, dead, missing or upcoming.
    Audit {
        id: u64,
        /// Start, RFC 3339 (default: 7 days before --to).
        #[arg(long)]
        from: Option<String>,
        /// End, RFC 3339, exclusive (default: now).
        #[arg(long)]
        to: Option<String>,
    },
    /// One more occurrence, now — also of a paused schedule: a job with
    /// the schedule's topic, payload, headers and policy, under a key of
    /// its own (`<key>@trigger-<hex>`), or `--key`, which makes it
    /// idempotent (sent again, the same job is shown).
    Trigger {
        id: u64,
        #[arg(long)]
        key: Option<String>,
    },
    /// The schedule's occurrences in [--from, --to) (in the past) that have
    /// no job, created as the materializer would have (the same keys: one
    /// that exists is left alone), due at once. Without --apply, says what
    /// it would create and creates nothing.
    Backfill {
        id: u64,
        /// Start, RFC 3339, inclusive.
        #[arg(long)]
        from: String,
        /// End, RFC 3339, exclusive; not after now.
        #[arg(long)]
        to: String,
        /// Create them (default: a preview).
        #[arg(long)]
        apply: bool,
    },
    /// The next occurrences of a timing, with the time-zone rules applied;
    /// nothing is stored.
    Preview {
        #[command(flatten)]
        timing: Timing,
        /// After this RFC 3339 time (default now).
        #[arg(long)]
        after: Option<String>,
        #[arg(long, default_value_t = 10)]
        count: usize,
    },
}

#[derive(Debug, Args)]
pub struct Timing {
    /// Cron: 5 fields, or 6 with seconds first.
    #[arg(long, required_unless_present = "every_ms")]
    cron: Option<String>,
    /// IANA time zone of --cron (default UTC).
    #[arg(long)]
    time_zone: Option<String>,
    /// Or a fixed period in milliseconds.
    #[arg(long, conflicts_with = "cron")]
    every_ms: Option<u64>,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    #[arg(long)]
    topic: String,
    /// The schedule's key (each occurrence's job key is <key>@<instant>).
    #[arg(long)]
    key: String,
    #[command(flatten)]
    timing: Timing,
    /// The payload, JSON.
    #[arg(long)]
    payload: Option<String>,
    /// No occurrence before this RFC 3339 time.
    #[arg(long)]
    start_at: Option<String>,
    /// No occurrence after this RFC 3339 time.
    #[arg(long)]
    end_at: Option<String>,
    #[arg(long)]
    max_occurrences: Option<u32>,
    /// skip, fire_once or fire_all.
    #[arg(long)]
    misfire: Option<String>,
}

fn timing_body(timing: &Timing, body: &mut Map<String, Value>) {
    if let Some(cron) = &timing.cron {
        body.insert("cron".into(), json!(cron));
    }
    if let Some(zone) = &timing.time_zone {
        body.insert("time_zone".into(), json!(zone));
    }
    if let Some(every) = timing.every_ms {
        body.insert("every_ms".into(), json!(every));
    }
}

const TOPIC_COLUMNS: [&str; 8] = [
    "topic",
    "paused",
    "max_per_second",
    "source",
    "group_by",
    "group_per_second",
    "schema",
    "updated_by",
];

fn print_topic(view: &Value) {
    print_table(&TOPIC_COLUMNS, &[topic_row(view)]);
}

fn topic_row(view: &Value) -> Vec<String> {
    [
        "topic",
        "paused",
        "max_per_second",
        "max_per_second_source",
        "group_by",
        "group_max_per_second",
        "payload_schema",
        "updated_by",
    ]
    .iter()
    .map(|field| match *field {
        // A schema is long: the table says whether there is one.
        "payload_schema" if !view[*field].is_null() => "yes".to_owned(),
        _ => text(&view[*field]),
    })
    .collect()
}

pub async fn topics(
    client: &Client,
    command: TopicsCommand,
    json: bool,
) -> Result<(), ClientError> {
    let view = match command {
        TopicsCommand::List => {
            let list = client.get("/v1/topics").await?;
            if json {
                print_json(&list);
            } else {
                let rows: Vec<Vec<String>> = list["topics"]
                    .as_array()
                    .map(|topics| topics.iter().map(topic_row).collect())
                    .unwrap_or_default();
                print_table(&TOPIC_COLUMNS, &rows);
            }
            return Ok(());
        }
        TopicsCommand::Get { topic } => client.get(&format!("/v1/topics/{topic}")).await?,
        TopicsCommand::Pause { topic } => {
            client
                .post(&format!("/v1/topics/{topic}/pause"), &json!({}))
                .await?
                .1
        }
        TopicsCommand::Resume { topic } => {
            client
                .post(&format!("/v1/topics/{topic}/resume"), &json!({}))
                .await?
                .1
        }
        TopicsCommand::Pace {
            topic,
            max_per_second,
            clear,
        } => {
            let rate = if clear {
                Value::Null
            } else {
                json!(max_per_second)
            };
            client
                .patch(
                    &format!("/v1/topics/{topic}"),
                    &json!({"max_per_second": rate}),
                )
                .await?
        }
        TopicsCommand::Group {
            topic,
            group_by,
            per_second,
            clear,
        } => {
            let body = if clear {
                json!({"group_by": null, "group_max_per_second": null})
            } else {
                json!({"group_by": group_by, "group_max_per_second": per_second})
            };
            client.patch(&format!("/v1/topics/{topic}"), &body).await?
        }
        TopicsCommand::Schema { topic, file, clear } => {
            let schema = match (clear, file) {
                (true, _) | (false, None) => Value::Null,
                (false, Some(path)) => {
                    let text = std::fs::read_to_string(&path).map_err(|err| {
                        ClientError::Usage(format!("cannot read {}: {err}", path.display()))
                    })?;
                    serde_json::from_str(&text).map_err(|err| {
                        ClientError::Usage(format!("{} is not JSON: {err}", path.display()))
                    })?
                }
            };
            client
                .patch(
                    &format!("/v1/topics/{topic}"),
                    &json!({"payload_schema": schema}),
                )
                .await?
        }
    };
    if json {
        print_json(&view);
    } else {
        print_topic(&view);
    }
    Ok(())
}

fn schedule_row(s: &Value) -> Vec<String> {
    let timing = match (&s["cron"], &s["every_ms"]) {
        (Value::String(cron), _) => format!("{cron} ({})", text(&s["time_zone"])),
        (_, every) => format!("every {} ms", text(every)),
    };
    vec![
        text(&s["id"]),
        text(&s["topic"]),
        text(&s["key"]),
        text(&s["status"]),
        timing,
        text(&s["next_at"]),
        text(&s["occurrences"]),
    ]
}

const SCHEDULE_HEADERS: [&str; 7] = [
    "id",
    "topic",
    "key",
    "status",
    "timing",
    "next_at",
    "occurrences",
];

fn print_schedule(s: &Value) {
    print_table(&SCHEDULE_HEADERS, &[schedule_row(s)]);
    if let Some(pending) = s["pending"].as_array().filter(|p| !p.is_empty()) {
        println!();
        let rows: Vec<Vec<String>> = pending
            .iter()
            .map(|p| vec![text(&p["job_id"]), text(&p["run_at"]), text(&p["key"])])
            .collect();
        print_table(&["pending job", "run_at", "key"], &rows);
    }
}

/// The outcomes of an audit, in the order its summary names them.
const OUTCOMES: [&str; 9] = [
    "produced",
    "created",
    "upcoming",
    "paused",
    "skipped",
    "cancelled",
    "expired",
    "dead",
    "missing",
];

/// An audit as people read it: a summary line (each outcome's count),
/// then a row per occurrence.
fn audit_table(answer: &Value) -> String {
    let occurrences = answer["occurrences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let outcomes: Vec<String> = OUTCOMES
        .iter()
        .filter_map(|outcome| {
            let n = occurrences
                .iter()
                .filter(|o| o["outcome"] == *outcome)
                .count();
            (n > 0).then(|| format!("{n} {outcome}"))
        })
        .collect();
    let mut out = format!(
        "schedule {} from {} to {} (as of {}): {} expected, {} fired, {} missing{}\n",
        text(&answer["schedule_id"]),
        text(&answer["from"]),
        text(&answer["to"]),
        text(&answer["at"]),
        text(&answer["expected"]),
        text(&answer["fired"]),
        text(&answer["missing"]),
        if outcomes.is_empty() {
            String::new()
        } else {
            format!(" ({})", outcomes.join(", "))
        }
    );
    let rows: Vec<Vec<String>> = occurrences
        .iter()
        .map(|o| {
            let kafka = match (&o["partition"], &o["offset"]) {
                (Value::Null, _) | (_, Value::Null) => "-".to_owned(),
                (partition, offset) => format!("{partition}/{offset}"),
            };
            vec![
                text(&o["expected_at"]),
                text(&o["outcome"]),
                text(&o["job_id"]),
                text(&o["status"]),
                kafka,
                text(&o["dispatched_at"]),
                text(&o["verified_at"]),
                consumed_by(&o["consumed"]),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out.push_str(&table_render(
            &[
                "expected_at",
                "outcome",
                "job",
                "status",
                "partition/offset",
                "dispatched_at",
                "verified_at",
                "consumed_by",
            ],
            &rows,
        ));
    }
    out
}

/// The consumer groups that read an occurrence's record, by name; "-" for
/// none (or none followed).
fn consumed_by(consumed: &Value) -> String {
    let groups: Vec<&str> = consumed
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| !c["at"].is_null())
        .filter_map(|c| c["group"].as_str())
        .collect();
    if groups.is_empty() {
        "-".to_owned()
    } else {
        groups.join(",")
    }
}

/// A backfill as people read it: a summary line, then the instants
/// created (or that would be), as many as the answer lists.
fn backfill_text(answer: &Value) -> String {
    let dry_run = answer["dry_run"] != Value::Bool(false);
    let mut out = format!(
        "schedule {} from {} to {}: {} expected, {} existing, {} {}\n",
        text(&answer["schedule_id"]),
        text(&answer["from"]),
        text(&answer["to"]),
        text(&answer["expected"]),
        text(&answer["existing"]),
        text(&answer["created"]),
        if dry_run {
            "to create (a preview: --apply creates them)"
        } else {
            "created"
        }
    );
    let shown = answer["preview"].as_array().cloned().unwrap_or_default();
    for at in &shown {
        out.push_str(&format!("  {}\n", text(at)));
    }
    let created = answer["created"].as_u64().unwrap_or(0);
    if created > shown.len() as u64 {
        out.push_str(&format!("  … and {} more\n", created - shown.len() as u64));
    }
    out
}

/// Long because it is a dispatch table: one short arm per subcommand.
pub async fn schedules(
    client: &Client,
    command: SchedulesCommand,
    json: bool,
) -> Result<(), ClientError> {
    let schedule = match command {
        SchedulesCommand::List { topic, status } => {
            let mut path = "/v1/schedules?limit=1000".to_owned();
            if let Some(topic) = topic {
                path.push_str(&format!("&topic={topic}"));
            }
            if let Some(status) = status {
                path.push_str(&format!("&status={status}"));
            }
            let page = client.get(&path).await?;
            if json {
                print_json(&page);
            } else {
                let rows: Vec<Vec<String>> = page["schedules"]
                    .as_array()
                    .map(|list| list.iter().map(schedule_row).collect())
                    .unwrap_or_default();
                print_table(&SCHEDULE_HEADERS, &rows);
            }
            return Ok(());
        }
        SchedulesCommand::Preview {
            timing,
            after,
            count,
        } => {
            let mut body = Map::new();
            timing_body(&timing, &mut body);
            if let Some(after) = after {
                body.insert("after".into(), json!(after));
            }
            body.insert("count".into(), json!(count));
            let (_, preview) = client
                .post("/v1/schedules/preview", &Value::Object(body))
                .await?;
            if json {
                print_json(&preview);
            } else {
                let utc = preview["occurrences"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let local = preview["local"].as_array().cloned().unwrap_or_default();
                let rows: Vec<Vec<String>> = utc
                    .iter()
                    .enumerate()
                    .map(|(i, at)| vec![text(at), local.get(i).map(text).unwrap_or_default()])
                    .collect();
                print_table(&["utc", "local"], &rows);
            }
            return Ok(());
        }
        SchedulesCommand::Audit { id, from, to } => {
            let path = format!(
                "/v1/schedules/{id}/audit{}",
                query(&[("from", from), ("to", to)])
            );
            let answer = client.get(&path).await?;
            if json {
                print_json(&answer);
            } else {
                print!("{}", audit_table(&answer));
            }
            return Ok(());
        }
        SchedulesCommand::Trigger { id, key } => {
            let body = match key {
                Some(key) => json!({ "key": key }),
                None => json!({}),
            };
            let (_, job) = client
                .post(&format!("/v1/schedules/{id}/trigger"), &body)
                .await?;
            if json {
                print_json(&job);
            } else {
                print_job(&job);
            }
            return Ok(());
        }
        SchedulesCommand::Backfill {
            id,
            from,
            to,
            apply,
        } => {
            let body = json!({ "from": from, "to": to, "dry_run": !apply });
            let (_, answer) = client
                .post(&format!("/v1/schedules/{id}/backfill"), &body)
                .await?;
            if json {
                print_json(&answer);
            } else {
                print!("{}", backfill_text(&answer));
            }
            return Ok(());
        }
        SchedulesCommand::Get { id } => client.get(&format!("/v1/schedules/{id}")).await?,
        SchedulesCommand::Create(args) => {
            let mut body = Map::new();
            body.insert("topic".into(), json!(args.topic));
            body.insert("key".into(), json!(args.key));
            timing_body(&args.timing, &mut body);
            if let Some(payload) = args.payload {
                let value: Value = serde_json::from_str(&payload)
                    .map_err(|err| ClientError::Usage(format!("--payload is not JSON: {err}")))?;
                body.insert("payload".into(), value);
            }
            for (name, value) in [
                ("start_at", args.start_at.map(Value::from)),
                ("end_at", args.end_at.map(Value::from)),
                ("max_occurrences", args.max_occurrences.map(Value::from)),
                ("misfire", args.misfire.map(Value::from)),
            ] {
                if let Some(value) = value {
                    body.insert(name.into(), value);
                }
            }
            client.post("/v1/schedules", &Value::Object(body)).await?.1
        }
        SchedulesCommand::Pause { id } => client
            .post(&format!("/v1/schedules/{id}/pause"), &json!({}))
            .await?
            .1["schedule"]
            .take(),
        SchedulesCommand::Resume { id } => client
            .post(&format!("/v1/schedules/{id}/resume"), &json!({}))
            .await?
            .1["schedule"]
            .take(),
        SchedulesCommand::Delete {
            id,
            keep_occurrences,
        } => {
            let which = if keep_occurrences { "keep" } else { "cancel" };
            let answer = client
                .delete(&format!("/v1/schedules/{id}?occurrences={which}"))
                .await?;
            if json {
                print_json(&answer);
            } else {
                println!(
                    "schedule {id} deleted; {} pending occurrence(s) cancelled",
                    text(&answer["occurrences_cancelled"])
                );
            }
            return Ok(());
        }
    };
    if json {
        print_json(&schedule);
    } else {
        print_schedule(&schedule);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_audit_reads_as_a_summary_and_a_row_per_occurrence() {
        let answer = json!({
            "schedule_id": 7, "from": "2027-03-01T00:00:00.000Z", "to": "2027-03-04T00:00:00.000Z",
            "at": "2027-03-05T09:00:00.000Z", "expected": 3, "fired": 1, "missing": 1,
            "occurrences": [
                {"expected_at": "2027-03-01T08:00:00.000Z", "outcome": "produced", "job_id": 112,
                 "status": "succeeded", "run_at": "2027-03-01T08:00:00.000Z",
                 "dispatched_at": "2027-03-01T08:00:00.012Z", "partition": 0, "offset": 41},
                {"expected_at": "2027-03-02T08:00:00.000Z", "outcome": "paused", "job_id": null,
                 "status": null, "run_at": null, "dispatched_at": null, "partition": null, "offset": null},
                {"expected_at": "2027-03-03T08:00:00.000Z", "outcome": "missing", "job_id": null,
                 "status": null, "run_at": null, "dispatched_at": null, "partition": null, "offset": null}
            ]
        });
        let table = audit_table(&answer);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "schedule 7 from 2027-03-01T00:00:00.000Z to 2027-03-04T00:00:00.000Z \
             (as of 2027-03-05T09:00:00.000Z): 3 expected, 1 fired, 1 missing \
             (1 produced, 1 paused, 1 missing)"
        );
        assert!(lines[1].starts_with("expected_at"), "{table}");
        assert!(
            lines[2].contains("produced") && lines[2].contains("112") && lines[2].contains("0/41"),
            "{table}"
        );
        assert!(
            lines[3].contains("paused") && lines[3].contains(" - "),
            "{table}"
        );
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn a_backfill_reads_as_a_summary_and_the_instants() {
        let mut answer = json!({
            "schedule_id": 7, "from": "2027-03-01T00:00:00.000Z", "to": "2027-03-04T00:00:00.000Z",
            "dry_run": true, "expected": 3, "created": 2, "existing": 1,
            "preview": ["2027-03-02T08:00:00.000Z", "2027-03-03T08:00:00.000Z"]
        });
        let text = backfill_text(&answer);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "schedule 7 from 2027-03-01T00:00:00.000Z to 2027-03-04T00:00:00.000Z: \
             3 expected, 1 existing, 2 to create (a preview: --apply creates them)"
        );
        assert_eq!(
            lines[1..],
            ["  2027-03-02T08:00:00.000Z", "  2027-03-03T08:00:00.000Z"]
        );
        answer["dry_run"] = json!(false);
        answer["created"] = json!(150);
        let text = backfill_text(&answer);
        assert!(
            text.lines().next().unwrap().ends_with("150 created"),
            "{text}"
        );
        assert!(text.ends_with("  … and 148 more\n"), "{text}");
    }
}
