//! `tickler jobs`: see and change jobs through a running tickler's API.
//! A readable table by default, the API's JSON with `--json`.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Map, Value};

use super::client::{Client, ClientError};

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Show one job: its state, time, attempts, Kafka position, last error
    /// and payload.
    Get { id: u64 },
    /// List jobs by id, without payloads, filtered as `GET /v1/jobs`.
    List(ListArgs),
    /// Schedule a job: `--topic` and `--at` or `--in`.
    Create(CreateArgs),
    /// Move a pending job to a new time (reads its version first, so a job
    /// changed meanwhile is refused, not overwritten).
    Move {
        id: u64,
        #[command(flatten)]
        when: When,
    },
    /// Move a pending job to another Kafka topic (reads its version
    /// first). Refused when a job there holds its key.
    Retarget {
        id: u64,
        /// The topic it goes to (it must exist on the broker).
        #[arg(long = "to-topic")]
        to_topic: String,
    },
    /// Cancel a pending job; definitive once it says so.
    Cancel { id: u64 },
    /// Send a dead job again, now or at `--at`/`--in`, with a fresh budget
    /// of attempts (admin scope).
    Redrive {
        id: u64,
        /// Attempts it gets from now (default: its topic's max_attempts).
        #[arg(long)]
        max_attempts: Option<u32>,
        #[command(flatten)]
        when: WhenMaybe,
    },
    /// Let a held job go (one whose payload no longer matched its topic's
    /// payload schema when due): checked against the schema first, unless
    /// `--force` (admin scope: this attempt is sent as it is).
    Release {
        id: u64,
        #[arg(long)]
        force: bool,
    },
    /// A job's changes of state, time and attempt, oldest first, with who
    /// made each.
    History { id: u64 },
    /// Change every job a filter matches: shows a preview (count and
    /// sample), asks, then applies in batches with a progress bar. Jobs
    /// that moved on meanwhile are skipped, never forced.
    Bulk(BulkArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    filter: ListFilter,
    /// Exact key.
    #[arg(long)]
    key: Option<String>,
    /// Only dispatched jobs this consumer group has not read yet (of the
    /// topics it is followed on: `[topics.T] consumer_groups`, or found
    /// reading them).
    #[arg(long)]
    unconsumed_by: Option<String>,
    /// Only jobs held back because their payload no longer matched their
    /// topic's payload schema (`held_reason` says where).
    #[arg(long)]
    held: bool,
    /// Jobs per page (1 to 1000).
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// Start after this page (the `next` cursor a previous list printed).
    #[arg(long)]
    cursor: Option<String>,
    /// Follow every page to the end.
    #[arg(long)]
    all: bool,
}

#[derive(Debug, Args)]
struct ListFilter {
    /// Only this topic.
    #[arg(long)]
    topic: Option<String>,
    /// pending, dispatching, dispatched, succeeded, dead, cancelled or
    /// expired.
    #[arg(long)]
    status: Option<String>,
    /// Due at or after this RFC 3339 time.
    #[arg(long = "from")]
    run_at_from: Option<String>,
    /// Due before this RFC 3339 time.
    #[arg(long = "to")]
    run_at_to: Option<String>,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The Kafka topic to produce it to.
    #[arg(long)]
    topic: String,
    /// Idempotency key: creating the same (topic, key) again returns the
    /// existing job.
    #[arg(long)]
    key: Option<String>,
    #[command(flatten)]
    when: CreateWhen,
    /// JSON payload, produced as its text.
    #[arg(long, conflicts_with_all = ["payload_file", "payload_base64"])]
    payload: Option<String>,
    /// Raw payload bytes from a file ('-' for stdin).
    #[arg(long, conflicts_with = "payload_base64")]
    payload_file: Option<String>,
    /// Raw payload bytes, base64.
    #[arg(long)]
    payload_base64: Option<String>,
    /// A Kafka header, NAME=VALUE; repeat for more.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// Wait for a consumer's result (retry and dead on failure).
    #[arg(long)]
    expects_result: bool,
    /// Attempts before it ends dead (with --expects-result).
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Not produced by this RFC 3339 time, it ends expired, never produced.
    #[arg(long, conflicts_with = "ttl")]
    expires_at: Option<String>,
    /// Or: how long after its time it may still be produced (e.g. 90s, 10m).
    #[arg(long, value_parser = duration_parse)]
    ttl: Option<i64>,
    /// A flexible window after its time (e.g. 10m): tickler picks the
    /// instant in it, spreading what falls due together.
    #[arg(long, value_parser = duration_parse)]
    window: Option<i64>,
    /// The IANA zone of --local, e.g. Australia/Melbourne.
    #[arg(long, requires = "local")]
    time_zone: Option<String>,
    /// If a job holds (topic, key): `reject` (the default) or `debounce`
    /// (move the pending one to this time and payload; a finished one
    /// starts a new generation).
    #[arg(long, value_parser = ["reject", "debounce"], requires = "key")]
    on_conflict: Option<String>,
    /// With --on-conflict debounce: never later than this after the first
    /// request (e.g. 5m).
    #[arg(long, value_parser = duration_parse, requires = "on_conflict")]
    max_delay: Option<i64>,
}

/// A time: exactly one of `--at` and `--in`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct When {
    /// RFC 3339 time, e.g. 2030-01-31T09:00:00Z.
    #[arg(long)]
    at: Option<String>,
    /// From now: e.g. 90s, 10m, 1h30m, 2d, 500ms.
    #[arg(long = "in", value_parser = duration_parse)]
    after: Option<i64>,
}

/// A new job's time: exactly one of `--at`, `--in` and `--local`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct CreateWhen {
    /// RFC 3339 time, e.g. 2030-01-31T09:00:00Z.
    #[arg(long)]
    at: Option<String>,
    /// From now: e.g. 90s, 10m, 1h30m, 2d, 500ms.
    #[arg(long = "in", value_parser = duration_parse)]
    after: Option<i64>,
    /// A wall-clock time in --time-zone, e.g. 2027-11-12T08:00: kept,
    /// and the job moved if a newer tzdata changes its instant.
    #[arg(long, requires = "time_zone")]
    local: Option<String>,
}

/// A time, or now when neither is given.
#[derive(Debug, Args)]
#[group(required = false, multiple = false)]
pub struct WhenMaybe {
    /// RFC 3339 time.
    #[arg(long)]
    at: Option<String>,
    /// From now: e.g. 90s, 10m, 1h30m.
    #[arg(long = "in", value_parser = duration_parse)]
    after: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BulkActionArg {
    /// Cancel pending jobs.
    Cancel,
    /// Move pending jobs by `--by` (e.g. 1h, or -10m for earlier).
    Shift,
    /// Move pending jobs to `--to-time`.
    Move,
    /// Send dead jobs again (admin scope).
    Redrive,
    /// Move pending jobs to the topic `--to-topic`; a job whose key is
    /// taken there stays (a conflict).
    Retarget,
    /// Let held jobs go (held by their topic's payload schema): each
    /// checked against the schema first, unless `--force` (admin scope);
    /// one still failing stays held (a conflict).
    Release,
}

#[derive(Debug, Args)]
pub struct BulkArgs {
    /// What to do to each matching job.
    action: BulkActionArg,
    #[command(flatten)]
    filter: ListFilter,
    /// Keys starting with this.
    #[arg(long)]
    key_prefix: Option<String>,
    /// These job ids (comma-separated).
    #[arg(long, value_delimiter = ',')]
    ids: Vec<u64>,
    /// Only pending jobs held by their topic's payload schema.
    #[arg(long, conflicts_with = "not_held")]
    held: bool,
    /// Only pending jobs not held.
    #[arg(long)]
    not_held: bool,
    /// shift: by how much (e.g. 30m, -2h).
    #[arg(long, value_parser = duration_parse, allow_hyphen_values = true)]
    by: Option<i64>,
    /// move: the new RFC 3339 time.
    #[arg(long = "to-time")]
    to_time: Option<String>,
    /// retarget: the topic the jobs go to.
    #[arg(long = "to-topic")]
    to_topic: Option<String>,
    /// redrive: attempts each job gets from now.
    #[arg(long)]
    max_attempts: Option<u32>,
    /// release: without the payload schema check (admin scope): each
    /// job's current attempt is sent as it is.
    #[arg(long)]
    force: bool,
    /// Only show the preview.
    #[arg(long)]
    dry_run: bool,
    /// Apply without asking.
    #[arg(long, short)]
    yes: bool,
    /// Start it and print its id without following it.
    #[arg(long)]
    no_wait: bool,
}

pub use crate::domain::job::duration_parse;

fn schedule(at: &Option<String>, after: Option<i64>, body: &mut Map<String, Value>) {
    if let Some(at) = at {
        body.insert("run_at".into(), json!(at));
    }
    if let Some(ms) = after {
        body.insert("delay_ms".into(), json!(ms));
    }
}

/// Query-string pairs, percent-encoded.
pub(super) fn query(pairs: &[(&str, Option<String>)]) -> String {
    let encoded: Vec<String> = pairs
        .iter()
        .filter_map(|(name, value)| {
            value
                .as_ref()
                .map(|v| format!("{name}={}", percent_encode(v)))
        })
        .collect();
    if encoded.is_empty() {
        String::new()
    } else {
        format!("?{}", encoded.join("&"))
    }
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Runs a `jobs` command; prints what it did. `json`: the API's answers.
///
/// Long because it is a dispatch table: one short arm per subcommand.
pub async fn run(client: &Client, command: JobsCommand, json: bool) -> Result<(), ClientError> {
    match command {
        JobsCommand::Get { id } => {
            let job = client.get(&format!("/v1/jobs/{id}")).await?;
            if json {
                print_json(&job);
            } else {
                print_job(&job);
            }
        }
        JobsCommand::List(args) => list(client, args, json).await?,
        JobsCommand::Create(args) => create(client, args, json).await?,
        JobsCommand::Move { id, when } => {
            let job = client.get(&format!("/v1/jobs/{id}")).await?;
            let mut body = Map::new();
            body.insert("version".into(), job["version"].clone());
            schedule(&when.at, when.after, &mut body);
            let job = client
                .patch(&format!("/v1/jobs/{id}"), &Value::Object(body))
                .await?;
            if json {
                print_json(&job);
            } else {
                println!("job {id} moved to {}", job["run_at"].as_str().unwrap_or(""));
            }
        }
        JobsCommand::Retarget { id, to_topic } => {
            let job = client.get(&format!("/v1/jobs/{id}")).await?;
            let body = json!({"version": job["version"], "topic": to_topic});
            let job = client.patch(&format!("/v1/jobs/{id}"), &body).await?;
            if json {
                print_json(&job);
            } else {
                println!("job {id} moved to topic {}", text(&job["topic"]));
            }
        }
        JobsCommand::Cancel { id } => {
            let answer = client.delete(&format!("/v1/jobs/{id}")).await?;
            if json {
                print_json(&answer);
            } else {
                let outcome = answer["outcome"].as_str().unwrap_or("cancelled");
                println!("job {id} {}", outcome.replace('_', " "));
            }
        }
        JobsCommand::Redrive {
            id,
            max_attempts,
            when,
        } => {
            let mut body = Map::new();
            if let Some(n) = max_attempts {
                body.insert("max_attempts".into(), json!(n));
            }
            schedule(&when.at, when.after, &mut body);
            let (_, job) = client
                .post(&format!("/v1/jobs/{id}/redrive"), &Value::Object(body))
                .await?;
            if json {
                print_json(&job);
            } else {
                println!(
                    "job {id} redriven: attempt {} of {}, at {}",
                    job["attempt"],
                    job["max_attempts"],
                    job["run_at"].as_str().unwrap_or("")
                );
            }
        }
        JobsCommand::Release { id, force } => {
            let (_, job) = client
                .post(&format!("/v1/jobs/{id}/release"), &json!({"force": force}))
                .await?;
            if json {
                print_json(&job);
            } else {
                println!(
                    "job {id} released: due at {}",
                    job["run_at"].as_str().unwrap_or("")
                );
            }
        }
        JobsCommand::History { id } => history(client, id, json).await?,
        JobsCommand::Bulk(args) => bulk(client, args, json).await?,
    }
    Ok(())
}

/// `tickler jobs create`: the flags as the API's create body.
async fn create(client: &Client, args: CreateArgs, json: bool) -> Result<(), ClientError> {
    let mut body = Map::new();
    body.insert("topic".into(), json!(args.topic));
    if let Some(key) = args.key {
        body.insert("key".into(), json!(key));
    }
    schedule(&args.when.at, args.when.after, &mut body);
    if let (Some(local), Some(zone)) = (&args.when.local, &args.time_zone) {
        body.insert("run_local".into(), json!(local));
        body.insert("time_zone".into(), json!(zone));
    }
    if let Some(on_conflict) = &args.on_conflict {
        body.insert("on_conflict".into(), json!(on_conflict));
    }
    if let Some(ms) = args.max_delay {
        body.insert("max_delay_ms".into(), json!(ms));
    }
    if let Some(payload) = args.payload {
        let value: Value = serde_json::from_str(&payload)
            .map_err(|err| ClientError::Usage(format!("--payload is not JSON: {err}")))?;
        body.insert("payload".into(), value);
    }
    if let Some(path) = args.payload_file {
        let bytes = if path == "-" {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
                .map_err(|err| ClientError::Usage(format!("reading stdin: {err}")))?;
            bytes
        } else {
            std::fs::read(&path)
                .map_err(|err| ClientError::Usage(format!("reading {path}: {err}")))?
        };
        use base64::Engine;
        body.insert(
            "payload_base64".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
        );
    }
    if let Some(encoded) = args.payload_base64 {
        body.insert("payload_base64".into(), json!(encoded));
    }
    if !args.headers.is_empty() {
        let mut headers = Map::new();
        for pair in &args.headers {
            let (name, value) = pair.split_once('=').ok_or_else(|| {
                ClientError::Usage(format!("--header {pair:?} is not NAME=VALUE"))
            })?;
            headers.insert(name.to_owned(), json!(value));
        }
        body.insert("headers".into(), Value::Object(headers));
    }
    if args.expects_result {
        body.insert("expects_result".into(), json!(true));
    }
    if let Some(n) = args.max_attempts {
        body.insert("max_attempts".into(), json!(n));
    }
    if let Some(at) = args.expires_at {
        body.insert("expires_at".into(), json!(at));
    }
    if let Some(ms) = args.ttl {
        body.insert("ttl_ms".into(), json!(ms));
    }
    if let Some(ms) = args.window {
        body.insert("window_ms".into(), json!(ms));
    }
    let (status, job) = client.post("/v1/jobs", &Value::Object(body)).await?;
    if json {
        print_json(&job);
    } else {
        let what = if status.as_u16() == 201 {
            "created"
        } else {
            "exists already"
        };
        println!(
            "job {} {what}: {} at {}",
            job["id"],
            job["topic"].as_str().unwrap_or(""),
            job["run_at"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// `tickler jobs history`: a job's recorded changes, as a table.
async fn history(client: &Client, id: u64, json: bool) -> Result<(), ClientError> {
    let history = client.get(&format!("/v1/jobs/{id}/history")).await?;
    if json {
        print_json(&history);
    } else {
        let rows: Vec<Vec<String>> = history["events"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let topic = match (e["topic_from"].as_str(), e["topic_to"].as_str()) {
                    (Some(from), Some(to)) => format!("{from} -> {to}"),
                    _ => String::new(),
                };
                vec![
                    text(&e["at"]),
                    text(&e["actor"]),
                    text(&e["status"]),
                    text(&e["run_at"]),
                    text(&e["attempt"]),
                    topic,
                ]
            })
            .collect();
        // The topic column only for a job that was retargeted.
        if rows.iter().any(|row| !row[5].is_empty()) {
            print_table(
                &["at", "actor", "status", "run_at", "attempt", "topic"],
                &rows,
            );
        } else {
            let rows: Vec<Vec<String>> = rows.into_iter().map(|row| row[..5].to_vec()).collect();
            print_table(&["at", "actor", "status", "run_at", "attempt"], &rows);
        }
    }
    Ok(())
}

async fn list(client: &Client, args: ListArgs, json: bool) -> Result<(), ClientError> {
    let mut cursor = args.cursor.clone();
    let mut all = Vec::new();
    loop {
        let path = format!(
            "/v1/jobs{}",
            query(&[
                ("topic", args.filter.topic.clone()),
                ("status", args.filter.status.clone()),
                ("key", args.key.clone()),
                ("run_at_from", args.filter.run_at_from.clone()),
                ("run_at_to", args.filter.run_at_to.clone()),
                ("unconsumed_by", args.unconsumed_by.clone()),
                ("held", args.held.then(|| "true".to_owned())),
                ("limit", Some(args.limit.to_string())),
                ("cursor", cursor.clone()),
            ])
        );
        let page = client.get(&path).await?;
        let jobs = page["jobs"].as_array().cloned().unwrap_or_default();
        cursor = page["next_cursor"].as_str().map(str::to_owned);
        all.extend(jobs);
        if !args.all || cursor.is_none() {
            break;
        }
    }
    if json {
        print_json(&json!({"jobs": all, "next_cursor": cursor}));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = all.iter().map(job_row).collect();
    print_table(&JOB_COLUMNS, &rows);
    match cursor {
        Some(next) => println!("{} jobs; more with --cursor {next}", all.len()),
        None => println!("{} jobs", all.len()),
    }
    Ok(())
}

/// Long because it follows the operation a person started through its
/// steps (preview, confirm, start, follow), each a few lines.
async fn bulk(client: &Client, args: BulkArgs, json: bool) -> Result<(), ClientError> {
    let action = match args.action {
        BulkActionArg::Cancel => json!({"type": "cancel"}),
        BulkActionArg::Shift => {
            let by = args
                .by
                .ok_or_else(|| ClientError::Usage("shift needs --by (e.g. 30m or -2h)".into()))?;
            json!({"type": "shift", "by_ms": by})
        }
        BulkActionArg::Move => {
            let to = args.to_time.clone().ok_or_else(|| {
                ClientError::Usage("move needs --to-time (an RFC 3339 time)".into())
            })?;
            json!({"type": "move", "run_at": to})
        }
        BulkActionArg::Redrive => match args.max_attempts {
            Some(n) => json!({"type": "redrive", "max_attempts": n}),
            None => json!({"type": "redrive"}),
        },
        BulkActionArg::Retarget => {
            let to = args.to_topic.clone().ok_or_else(|| {
                ClientError::Usage("retarget needs --to-topic (the topic the jobs go to)".into())
            })?;
            json!({"type": "retarget", "topic": to})
        }
        BulkActionArg::Release => json!({"type": "release", "force": args.force}),
    };
    let mut filter = Map::new();
    for (name, value) in [
        ("topic", &args.filter.topic),
        ("status", &args.filter.status),
        ("run_at_from", &args.filter.run_at_from),
        ("run_at_to", &args.filter.run_at_to),
        ("key_prefix", &args.key_prefix),
    ] {
        if let Some(value) = value {
            filter.insert(name.into(), json!(value));
        }
    }
    if !args.ids.is_empty() {
        filter.insert("ids".into(), json!(args.ids));
    }
    if args.held || args.not_held {
        filter.insert("held".into(), json!(args.held));
    }
    let request = |dry_run: bool| json!({"filter": Value::Object(filter.clone()), "action": action, "dry_run": dry_run});
    let (_, preview) = client.post("/v1/jobs/bulk", &request(true)).await?;
    if json && (args.dry_run || !args.yes) {
        print_json(&preview);
        if args.dry_run {
            return Ok(());
        }
    }
    let eligible = preview["eligible"].as_u64().unwrap_or(0);
    if !json {
        // A release changes held pending jobs only.
        let state = match action["type"].as_str() {
            Some("release") => "held",
            _ => preview["applies_to"].as_str().unwrap_or("?"),
        };
        println!(
            "{} jobs match; {eligible} are {state} and would be changed ({}), the others skipped",
            preview["matched"],
            action["type"].as_str().unwrap_or("?"),
        );
        if let Some(conflicts) = preview["conflicts"].as_u64().filter(|n| *n > 0) {
            println!(
                "{conflicts} of them would stay: a job on {} holds their key",
                action["topic"].as_str().unwrap_or("the target topic")
            );
        }
        if action["type"] == "release" && action["force"] != true {
            println!("each is checked against its topic's payload schema first; one still failing stays held");
        }
        let sample: Vec<Vec<String>> = preview["sample"]
            .as_array()
            .into_iter()
            .flatten()
            .map(job_row)
            .collect();
        if !sample.is_empty() {
            println!("first {}:", sample.len());
            print_table(&JOB_COLUMNS, &sample);
        }
    }
    if args.dry_run {
        return Ok(());
    }
    if eligible == 0 {
        if !json {
            println!("nothing to change");
        }
        return Ok(());
    }
    if !args.yes
        && !confirm(&format!(
            "Apply {} to these jobs?",
            action["type"].as_str().unwrap_or("it")
        ))?
    {
        println!("nothing changed");
        return Ok(());
    }
    let (_, started) = client.post("/v1/jobs/bulk", &request(false)).await?;
    let id = started["id"].as_u64().unwrap_or(0);
    if args.no_wait {
        if json {
            print_json(&started);
        } else {
            println!(
                "bulk operation {id} started; follow it with: curl {}/v1/bulk/{id}",
                client.base()
            );
        }
        return Ok(());
    }
    let mut op = started;
    let show = !json && std::io::stderr().is_terminal();
    while op["status"] == "running" {
        if show {
            progress(&op);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        op = client.get(&format!("/v1/bulk/{id}")).await?;
    }
    if show {
        progress(&op);
        eprintln!();
    }
    if json {
        print_json(&op);
    } else {
        println!(
            "bulk operation {id} {}: {} changed, {} skipped (moved on meanwhile) of {}",
            op["status"].as_str().unwrap_or("?"),
            op["changed"],
            op["skipped"],
            op["total"]
        );
        if let Some(conflicts) = op["conflicts"].as_u64().filter(|n| *n > 0) {
            if action["type"] == "release" {
                println!(
                    "{conflicts} stayed held: their payload still does not match their topic's payload schema"
                );
            } else {
                println!(
                    "{conflicts} stayed where they were: a job on {} holds their key",
                    action["topic"].as_str().unwrap_or("the target topic")
                );
            }
        }
        for error in op["errors"].as_array().into_iter().flatten() {
            println!("error: {}", text(error));
        }
    }
    if op["status"] == "failed" {
        return Err(ClientError::Unavailable(format!(
            "bulk operation {id} failed"
        )));
    }
    Ok(())
}

/// Asks on the terminal; refuses to guess when there is none.
fn confirm(question: &str) -> Result<bool, ClientError> {
    if !std::io::stdin().is_terminal() {
        return Err(ClientError::Usage(
            "not asking without a terminal: pass --yes to apply, or --dry-run to preview".into(),
        ));
    }
    // On stderr: stdout may be JSON for a script.
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|err| ClientError::Usage(format!("reading the answer: {err}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES"))
}

fn progress(op: &Value) {
    let total = op["total"].as_u64().unwrap_or(0).max(1);
    let done = op["done"].as_u64().unwrap_or(0).min(total);
    let width = 30;
    let filled = (done * width / total) as usize;
    eprint!(
        "\r[{}{}] {done}/{total}  changed {}  skipped {}",
        "#".repeat(filled),
        "-".repeat(width as usize - filled),
        op["changed"],
        op["skipped"]
    );
    let _ = std::io::stderr().flush();
}

const JOB_COLUMNS: [&str; 6] = ["id", "topic", "key", "status", "run_at", "attempt"];

fn job_row(job: &Value) -> Vec<String> {
    vec![
        text(&job["id"]),
        text(&job["topic"]),
        text(&job["key"]),
        text(&job["status"]),
        text(&job["run_at"]),
        format!("{}/{}", text(&job["attempt"]), text(&job["max_attempts"])),
    ]
}

/// A value as a table cell: strings bare, null as "-".
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

pub(super) fn print_job(job: &Value) {
    let fields = [
        "id",
        "topic",
        "key",
        "status",
        "run_at",
        "attempt",
        "max_attempts",
        "version",
        "expects_result",
        "ack_deadline",
        "created_at",
        "updated_at",
        "dispatched_at",
        "kafka",
        "verified_at",
        "last_error",
        "headers",
        "traceparent",
    ];
    for field in fields {
        if let Some(value) = job.get(field) {
            println!("{field:<15} {}", text(value));
        }
    }
    // One line per consumer group: when it read past the record.
    for consumed in job["consumed"].as_array().into_iter().flatten() {
        println!(
            "{:<15} {} at {}",
            "consumed",
            text(&consumed["group"]),
            text(&consumed["at"])
        );
    }
    if let Some(payload) = job.get("payload") {
        println!("{:<15} {payload}", "payload");
    } else if let Some(payload) = job.get("payload_base64") {
        println!("{:<15} {} (base64)", "payload", text(payload));
    }
}

/// Columns padded to their widest cell.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    print!("{}", table_render(headers, rows));
}

/// A table of `rows` under `headers`, each column as wide as its widest
/// cell, one line each.
pub fn table_render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        padded.join("  ").trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration_parse("500ms"), Ok(500));
        assert_eq!(duration_parse("90s"), Ok(90_000));
        assert_eq!(duration_parse("1h30m"), Ok(5_400_000));
        assert_eq!(duration_parse("2d"), Ok(172_800_000));
        assert_eq!(duration_parse("-10m"), Ok(-600_000));
        for bad in ["", "10", "ten", "5w", "-", "1h-3m", "99999999999999999d"] {
            assert!(duration_parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            query(&[
                ("key", Some("a b&c".into())),
                ("topic", None),
                ("limit", Some("5".into()))
            ]),
            "?key=a%20b%26c&limit=5"
        );
        assert_eq!(query(&[("topic", None)]), "");
    }
}
