//! `tickler import`: jobs loaded from a file — NDJSON (one create request
//! per line, the API's fields) or CSV (a header row naming them) — with
//! every check the batch API makes, straight into MySQL a batch at a time,
//! the jobs due within the window indexed in Redis as they are written.
//!
//! Idempotent on (topic, key): every job must have a key, and a job whose
//! key is taken is counted as already there, so a rerun after a stop
//! resumes where it was. Refused lines are counted by code, the first few
//! printed with their line numbers, all written to `--rejects` when asked.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::{json, Map, Value};
use tokio::sync::{Mutex, Notify, Semaphore};

use crate::api::{ApiError, CreateJob};
use crate::config::{Config, TopicRules};
use crate::domain::job::NewJob;
use crate::domain::keys::Keyring;
use crate::domain::request::Limits;
use crate::index::{self, Index};
use crate::roles::jobs::Jobs;
use crate::roles::topic_controls::TopicControls;
use crate::store::{Actor, BatchRow, Store};

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The file to load (`-`: standard input).
    pub file: PathBuf,
    /// Its format (default: by its extension, `.csv` or else NDJSON).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Write every refused line here, as NDJSON: its line number, the
    /// error's code and message.
    #[arg(long)]
    pub rejects: Option<PathBuf>,
    /// Jobs per INSERT transaction.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
    /// Batches written at once.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub parallel: u32,
    /// No progress line on standard error.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Ndjson,
    Csv,
}

/// What an import did.
#[derive(Debug, Default)]
struct Tally {
    lines: u64,
    created: u64,
    existing: u64,
    refused: u64,
    by_code: BTreeMap<String, u64>,
    /// The first refusals: (line, code, message).
    first: Vec<(u64, String, String)>,
}

/// Refused lines printed in the summary.
const FIRST_SHOWN: usize = 10;

/// A refused line.
struct Refusal {
    line: u64,
    code: String,
    message: String,
}

/// Checks a line's request — the API's JSON form, with the create rules
/// every edge applies ([`JobRequest::build`]) and the topics nobody may
/// write to; a job needs a key here. Refused: the API's error code and
/// message.
fn checked(
    text: &[u8],
    config: &Config,
    rules: &TopicRules,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<NewJob, (String, String)> {
    let refused = |err: ApiError| (err.code().to_owned(), err.to_string());
    let request: CreateJob = serde_json::from_slice(text).map_err(|err| {
        refused(if err.is_data() {
            ApiError::InvalidRequest(err.to_string())
        } else {
            ApiError::InvalidJson(err.to_string())
        })
    })?;
    let limits = Limits {
        payload_max_bytes: config.jobs.payload_max_bytes,
        max_schedule_ahead_days: config.jobs.max_schedule_ahead_days,
    };
    let request = request.request(limits, now).map_err(refused)?;
    if request.on_conflict.debounces() {
        // An import resumes by its keys: a rerun must find its jobs as it
        // left them, which a debounce (moving them) would not.
        return Err(refused(ApiError::InvalidRequest(
            "tickler import does not debounce: on_conflict \"debounce\" is for POST /v1/jobs and the ingress".to_owned(),
        )));
    }
    let job = request
        .build(limits, now, |topic| rules.defaults_for(topic))
        .map_err(|refusal| refused(refusal.into()))?;
    if let Some(why) = rules.topic_reserved(&job.topic) {
        return Err(refused(ApiError::ReservedTopic(why)));
    }
    if job.key.is_none() {
        return Err((
            "invalid_key".to_owned(),
            "import needs a key on every job: a rerun skips what is there by its key".to_owned(),
        ));
    }
    Ok(job)
}

/// A CSV record as a create request: each column its field, cells of
/// `payload`, `headers` and numbers read as JSON, empty cells left out.
fn csv_request(header: &csv::StringRecord, record: &csv::StringRecord) -> Result<Vec<u8>, String> {
    let mut fields = Map::new();
    for (name, cell) in header.iter().zip(record.iter()) {
        if cell.is_empty() {
            continue;
        }
        let value = match name {
            "topic" | "key" | "run_at" | "payload_base64" | "expires_at" => {
                Value::String(cell.to_owned())
            }
            // Any JSON value; a cell that is not JSON is a string payload.
            "payload" => {
                serde_json::from_str(cell).unwrap_or_else(|_| Value::String(cell.to_owned()))
            }
            _ => serde_json::from_str(cell)
                .map_err(|_| format!("column {name}: {cell:?} is not a JSON value"))?,
        };
        fields.insert(name.to_owned(), value);
    }
    serde_json::to_vec(&Value::Object(fields)).map_err(|err| err.to_string())
}

/// The file's requests, one by one: (line number, request JSON or why the
/// line is not one).
fn requests(
    args: &ImportArgs,
) -> anyhow::Result<Box<dyn Iterator<Item = (u64, Result<Vec<u8>, String>)> + Send>> {
    let input: Box<dyn Read + Send> = if args.file.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(&args.file)
                .map_err(|err| anyhow::anyhow!("cannot read {}: {err}", args.file.display()))?,
        )
    };
    let format = args.format.unwrap_or_else(|| {
        if args
            .file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
        {
            Format::Csv
        } else {
            Format::Ndjson
        }
    });
    Ok(match format {
        Format::Ndjson => Box::new(
            BufReader::with_capacity(1 << 20, input)
                .lines()
                .enumerate()
                .map(|(n, line)| {
                    (
                        n as u64 + 1,
                        line.map(String::into_bytes).map_err(|err| err.to_string()),
                    )
                })
                .filter(|(_, line)| !matches!(line, Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace))),
        ),
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(input);
            let header = reader
                .headers()
                .map_err(|err| anyhow::anyhow!("the CSV header: {err}"))?
                .clone();
            Box::new(reader.into_records().map(move |record| match record {
                // Line numbers count the header, as an editor shows them.
                Ok(record) => (
                    record.position().map_or(0, |p| p.line()),
                    csv_request(&header, &record),
                ),
                Err(err) => (
                    err.position().map_or(0, |p| p.line()),
                    Err(err.to_string()),
                ),
            }))
        }
    })
}

/// `tickler import FILE`. Exit status 0 when every line was created or
/// already there, 1 when some were refused.
///
/// Long because it is one loop over the file's lines — read, check, batch,
/// write — with the stores opened before it and the summary after.
pub async fn run(config: &Config, args: ImportArgs) -> anyhow::Result<ExitCode> {
    let keys = Keyring::load(
        config.encryption.active_key.as_deref(),
        &config.encryption.keys,
    )?;
    Store::migrate(&config.mysql.url).await?;
    let store = Store::connect_lazy(&config.mysql.url, args.parallel + 1, Actor::Import)?
        .with_keys(keys)
        .with_codec(config.compression.codec());
    let wrong = store.key_canaries_check().await?;
    if !wrong.is_empty() {
        anyhow::bail!(
            "encryption key(s) {}: not the key material rows were sealed under with this id (enc_key_canaries)",
            wrong.join(", ")
        );
    }
    // Held to a key every live instance has (see `codec_upkeep`).
    crate::roles::codec_upkeep::start(&store, config.instance_ttl()).await;
    // Written with the newest dictionary (`tickler compression train`),
    // sealed under the active key, noted for the doctor.
    store.key_used_note().await?;
    // Dictionaries loaded, and written as given while an instance that
    // cannot read compressed payloads is live; both read again every few
    // seconds (started above).
    let upkeep = tokio_util::sync::CancellationToken::new();
    tokio::spawn(crate::roles::codec_upkeep::run(
        store.clone(),
        config.instance_ttl(),
        upkeep.clone(),
    ));
    let _upkeep = upkeep.drop_guard();
    let shards = match store.shard_leases().await {
        Ok(leases) if !leases.is_empty() => leases.len() as u32,
        _ => config.cluster.shards,
    };
    let client = index::client_open(config).map_err(anyhow::Error::msg)?;
    let index = Index::connect_with(client, &config.redis.prefix, shards)?;
    let topics = crate::kafka::Topics::new(
        &config.kafka.brokers,
        &config.kafka.options,
        Duration::from_millis(config.kafka.topic_refresh_ms),
    );
    let rules = config.topic_rules();
    // Payload schemas as they stand when the import starts (the
    // dispatcher checks each job again before it sends it).
    let controls = TopicControls::new(store.clone(), config);
    controls.refresh().await?;
    let mut rejects = match &args.rejects {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|err| anyhow::anyhow!("cannot write {}: {err}", path.display()))?,
        )),
        None => None,
    };

    let tally = Arc::new(Mutex::new(Tally::default()));
    let slots = Arc::new(Semaphore::new(args.parallel as usize));
    let service = Jobs::new(
        store.clone(),
        index,
        config.window(),
        Arc::new(Notify::new()),
    );
    let mut writes = tokio::task::JoinSet::new();
    let mut topic_ok: HashMap<String, bool> = HashMap::new();
    let started = Instant::now();
    let mut shown_at = Instant::now();
    let mut batch: Vec<(u64, NewJob)> = Vec::with_capacity(args.batch as usize);
    let mut lines = requests(&args)?;
    let mut refusals = Vec::new();
    loop {
        let next = lines.next();
        let last = next.is_none();
        let now = chrono::Utc::now();
        if let Some((line, request)) = next {
            let job = request
                .map_err(|message| ("invalid_json".to_owned(), message))
                .and_then(|text| checked(&text, config, &rules, now))
                .and_then(|job| {
                    controls
                        .payload_check(&job.topic, job.payload_kind, &job.payload)
                        .map_err(|mismatch| {
                            let err = ApiError::PayloadSchema(mismatch.to_string());
                            (err.code().to_owned(), err.to_string())
                        })?;
                    Ok(job)
                });
            match job {
                Ok(job) => {
                    let exists = match topic_ok.get(&job.topic) {
                        Some(known) => *known,
                        None => {
                            let known =
                                topics.preflight(config.kafka.topic_check, &job.topic).await;
                            topic_ok.insert(job.topic.clone(), known);
                            known
                        }
                    };
                    if exists {
                        batch.push((line, job));
                    } else {
                        refusals.push(Refusal {
                            line,
                            code: "unknown_topic".to_owned(),
                            message: format!("the broker has no topic {:?}", job.topic),
                        });
                    }
                }
                Err((code, message)) => refusals.push(Refusal {
                    line,
                    code,
                    message,
                }),
            }
        }
        if !refusals.is_empty() {
            let mut tally = tally.lock().await;
            for refusal in refusals.drain(..) {
                tally.lines += 1;
                tally.refused += 1;
                *tally.by_code.entry(refusal.code.clone()).or_default() += 1;
                if let Some(out) = rejects.as_mut() {
                    writeln!(
                        out,
                        "{}",
                        json!({"line": refusal.line, "code": refusal.code, "message": refusal.message})
                    )?;
                }
                if tally.first.len() < FIRST_SHOWN {
                    tally
                        .first
                        .push((refusal.line, refusal.code, refusal.message));
                }
            }
        }
        if batch.len() >= args.batch as usize || (last && !batch.is_empty()) {
            let jobs: Vec<NewJob> = batch.drain(..).map(|(_, job)| job).collect();
            let permit = slots.clone().acquire_owned().await?;
            let (jobs_service, tally) = (service.clone(), tally.clone());
            writes.spawn(async move {
                let _permit = permit;
                let jobs: Vec<&NewJob> = jobs.iter().collect();
                // Those due within the window go into Redis now, as the
                // API's do (the loader finds only what enters the window).
                let rows = jobs_service.create_many(&jobs, None).await?;
                let created = rows.iter().filter_map(BatchRow::created).count();
                let mut tally = tally.lock().await;
                tally.lines += rows.len() as u64;
                tally.created += created as u64;
                tally.existing += (rows.len() - created) as u64;
                Ok::<(), crate::store::StoreError>(())
            });
        }
        while let Some(done) = writes.try_join_next() {
            done??;
        }
        if !args.quiet && shown_at.elapsed() >= Duration::from_secs(1) {
            shown_at = Instant::now();
            progress(&*tally.lock().await, started.elapsed());
        }
        if last {
            break;
        }
    }
    while let Some(done) = writes.join_next().await {
        done??;
    }
    if let Some(out) = rejects.as_mut() {
        out.flush()?;
    }
    let tally = tally.lock().await;
    if !args.quiet {
        progress(&tally, started.elapsed());
        eprintln!();
    }
    summary(&tally, started.elapsed());
    store.close().await;
    Ok(if tally.refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One progress line, written over the last.
fn progress(tally: &Tally, took: Duration) {
    let rate = tally.lines as f64 / took.as_secs_f64().max(0.001);
    eprint!(
        "\r{} lines: {} created, {} already there, {} refused ({:.0} lines/s)   ",
        tally.lines, tally.created, tally.existing, tally.refused, rate
    );
    let _ = std::io::stderr().flush();
}

fn summary(tally: &Tally, took: Duration) {
    println!(
        "{} lines in {:.1} s: {} created, {} already there (same topic and key), {} refused",
        tally.lines,
        took.as_secs_f64(),
        tally.created,
        tally.existing,
        tally.refused
    );
    for (code, n) in &tally.by_code {
        println!("  {n} refused: {code}");
    }
    for (line, code, message) in &tally.first {
        println!("  line {line}: {code}: {message}");
    }
}
