//! Every fenced block of README.md and docs/ is either run here as written
//! or says, in the comment above it, why it is not: a documented command,
//! configuration, request or query that stops working fails the suite.
//!
//! The comment on the line before a block says what it is:
//!
//! - `<!-- example: sh -->`: run by bash against a running tickler of the
//!   test's own (database, Redis prefix, results topic), with an admin
//!   token in `$TOKEN`, `$auth` and `TICKLER_TOKEN`, `set -e`, and a `curl`
//!   that fails on an HTTP error. `own server` means the block starts
//!   tickler itself; `continued` appends it to the file's previous sh block.
//! - `<!-- example: toml -->`: a configuration file `tickler config` takes.
//! - `<!-- example: sql -->`: run on a migrated database.
//! - `<!-- example: POST /v1/jobs -->` (any method and path): a request
//!   body, sent; the answer is 2xx.
//! - `<!-- example: result record -->`: parsed as the results topic parses.
//! - `<!-- example: rust, from examples/X.rs -->`: a verbatim excerpt of an
//!   example the suite compiles.
//! - `<!-- recipe: NAME -->`: an SQL repair recipe, run by tests/recipes.rs.
//! - `<!-- output -->`: what a command prints; `<!-- not run: why -->`.
//!
//! `; given: job 17 dead, schedule 7` before `-->` makes the state the
//! block starts from: jobs 1..=17 created in order (the rest pending in
//! 2030 on `orders`), job 17 pending, dispatched (expecting a result) or
//! dead, `on TOPIC`, `at version N`; schedules 1..=7.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use tickler::kafka;
use tickler_testkit::{database_create, database_drop, unique, TestEnv};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The topics the examples use, created on the shared broker.
const TOPICS: &[&str] = &[
    "tickler.demo",
    "orders",
    "orders.reminders",
    "billing.charge",
    "billing.renewal",
    "reports.tick",
    "mail",
];

#[derive(Debug, Clone)]
struct Block {
    file: String,
    line: usize,
    /// The comment above the fence, without `<!--` and `-->`.
    note: String,
    text: String,
}

impl Block {
    fn kind(&self) -> &str {
        self.note.split(';').next().unwrap().trim()
    }

    fn given(&self) -> Option<&str> {
        self.note
            .split(';')
            .skip(1)
            .find_map(|part| part.trim().strip_prefix("given:"))
            .map(str::trim)
    }

    /// Whether `option` follows the kind (`example: sh; own server`).
    fn has(&self, option: &str) -> bool {
        self.note
            .split(';')
            .skip(1)
            .any(|part| part.trim() == option)
    }

    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn blocks_of(path: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(path).unwrap();
    let file = path.strip_prefix(ROOT).unwrap().display().to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with("```") {
            i += 1;
            continue;
        }
        let start = i;
        let end = (start + 1..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .unwrap_or_else(|| panic!("{file}:{}: a fence that never closes", start + 1));
        let above = lines[..start]
            .iter()
            .rev()
            .find(|line| !line.trim().is_empty())
            .map(|line| line.trim())
            .unwrap_or("");
        let note = above
            .strip_prefix("<!--")
            .and_then(|rest| rest.strip_suffix("-->"))
            .map(|note| note.trim().to_owned())
            .unwrap_or_default();
        blocks.push(Block {
            file: file.clone(),
            line: start + 1,
            note,
            text: lines[start + 1..end].join("\n") + "\n",
        });
        i = end + 1;
    }
    blocks
}

fn blocks() -> Vec<Block> {
    doc_files()
        .iter()
        .flat_map(|path| blocks_of(path))
        .collect()
}

fn blocks_in(file: &str) -> Vec<Block> {
    blocks_of(&Path::new(ROOT).join(file))
}

/// The kinds this file knows how to run or to leave.
fn kind_known(kind: &str) -> bool {
    let kind = kind.trim();
    kind == "output"
        || kind.starts_with("not run:")
        || kind.starts_with("recipe:")
        || kind.starts_with("example: sh")
        || kind == "example: toml"
        || kind == "example: sql"
        || kind == "example: result record"
        || kind.starts_with("example: rust, from examples/")
        || ["GET", "POST", "PATCH", "DELETE"]
            .iter()
            .any(|method| kind.starts_with(&format!("example: {method} /")))
}

/// Files with examples to run, and the test here that runs them.
const FILES_RUN: &[&str] = &[
    "README.md",
    "docs/api.md",
    "docs/cli.md",
    "docs/configuration.md",
    "docs/results.md",
    "docs/schedules.md",
    "docs/schema.md",
    "docs/security.md",
];

#[test]
fn every_block_in_the_docs_is_run_here_or_says_why_not() {
    let all = blocks();
    assert!(all.len() > 40, "the docs' blocks are found ({})", all.len());
    let mut unknown = Vec::new();
    for block in &all {
        if !kind_known(block.kind()) {
            unknown.push(format!("{} ({:?})", block.at(), block.note));
        }
        if block.kind().starts_with("not run:") {
            assert!(
                block.kind().len() > "not run: ".len() + 10,
                "{}: say why it is not run",
                block.at()
            );
        }
    }
    assert!(
        unknown.is_empty(),
        "blocks without a known note above them (see tests/docs.rs):\n{}",
        unknown.join("\n")
    );
    for block in all.iter().filter(|b| b.kind().starts_with("example:")) {
        assert!(
            FILES_RUN.contains(&block.file.as_str()),
            "{}: an example in a file no test here runs",
            block.at()
        );
    }
    // The recipes are run by tests/recipes.rs, by name.
    let recipes = std::fs::read_to_string(Path::new(ROOT).join("tests/recipes.rs")).unwrap();
    for block in all.iter().filter(|b| b.kind().starts_with("recipe:")) {
        let name = block.kind()["recipe:".len()..].trim();
        assert!(
            recipes.contains(&format!("\"{name}\"")),
            "{}: recipe {name} is run by tests/recipes.rs",
            block.at()
        );
    }
}

#[test]
fn the_readme_first_commands_are_what_ci_runs() {
    let first = &blocks_in("README.md")[0];
    assert!(first.kind().starts_with("not run:"), "{}", first.at());
    let ci = std::fs::read_to_string(Path::new(ROOT).join(".ci/run")).unwrap();
    for line in first.text.lines() {
        let command = line.split('#').next().unwrap().trim();
        assert!(
            ci.lines().any(|l| l.trim().ends_with(command)),
            ".ci/run runs `{command}`, as the README's first block says"
        );
    }
}

// ---------------------------------------------------------------------
// The state a block starts from.

#[derive(Debug, Default)]
struct Given {
    /// id → (state, topic, version)
    jobs: BTreeMap<u64, (String, String, u64)>,
    schedules: u64,
}

fn given_parse(text: Option<&str>) -> Given {
    let mut given = Given::default();
    let Some(text) = text else {
        return given;
    };
    for item in text.split(',') {
        let words: Vec<&str> = item.split_whitespace().collect();
        match words.as_slice() {
            ["schedule", n] => given.schedules = n.parse().unwrap(),
            ["job", n, state, rest @ ..] => {
                let mut topic = "orders".to_owned();
                let mut version = 1;
                let mut rest = rest.iter();
                while let Some(word) = rest.next() {
                    match *word {
                        "on" => topic = rest.next().unwrap().to_string(),
                        "at" => {
                            assert_eq!(rest.next(), Some(&"version"));
                            version = rest.next().unwrap().parse().unwrap();
                        }
                        other => panic!("given: what is {other:?} in {item:?}"),
                    }
                }
                assert!(
                    ["pending", "dispatched", "dead"].contains(state),
                    "given: state {state}"
                );
                given
                    .jobs
                    .insert(n.parse().unwrap(), (state.to_string(), topic, version));
            }
            _ => panic!("given: cannot read {item:?}"),
        }
    }
    given
}

async fn given_make(env: &TestEnv, given: &Given) {
    let last = given.jobs.keys().max().copied().unwrap_or(0);
    for id in 1..=last {
        let (state, topic, _) =
            given
                .jobs
                .get(&id)
                .cloned()
                .unwrap_or(("pending".to_owned(), "orders".to_owned(), 1));
        let body = match state.as_str() {
            "pending" => json!({"topic": topic, "key": format!("order-{id}"),
                                "payload": {"id": id}, "run_at": "2030-01-31T09:00:00Z"}),
            _ => json!({"topic": topic, "key": format!("order-{id}"), "payload": {"id": id},
                        "delay_ms": 0, "expects_result": true, "max_attempts": 1}),
        };
        let (status, job) = env.post("/v1/jobs", body).await;
        assert_eq!(status, 201, "{job}");
        assert_eq!(job["id"], id, "ids run from 1 in a fresh database: {job}");
    }
    for (&id, (state, _, version)) in &given.jobs {
        if state != "pending" {
            env.status_await(id, "dispatched", Duration::from_secs(20))
                .await;
        }
        if state == "dead" {
            let (status, answer) = env
                .post(
                    &format!("/v1/jobs/{id}/result"),
                    json!({"attempt": 1, "outcome": "failed", "error": "bad card"}),
                )
                .await;
            assert_eq!(status, 200, "{answer}");
            assert_eq!(env.job_status(id).await, "dead");
        }
        for _ in 1..*version {
            let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
            let (status, answer) = env
                .request(
                    "PATCH",
                    &format!("/v1/jobs/{id}"),
                    Some(json!({"version": job["version"], "run_at": job["run_at"]}).to_string()),
                )
                .await;
            assert_eq!(status, 200, "{answer}");
        }
    }
    for n in 1..=given.schedules {
        let (status, schedule) = env
            .post(
                "/v1/schedules",
                json!({"topic": "orders", "key": format!("given-{n}"), "every_ms": 3_600_000}),
            )
            .await;
        assert_eq!(status, 201, "{schedule}");
        assert_eq!(schedule["id"], n, "{schedule}");
    }
}

async fn topics_create() {
    let brokers = tickler_testkit::kafka_brokers();
    for topic in TOPICS {
        kafka::topic_ensure_with(&brokers, &Default::default(), topic, 1)
            .await
            .expect("kafka is running (scripts/services)");
    }
}

// ---------------------------------------------------------------------
// Shell.

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tickler"))
        .parent()
        .unwrap()
        .to_owned()
}

/// A directory whose `curl` fails on an HTTP error, as `--fail-with-body`
/// does, so `set -e` stops at a refused request.
fn curl_strict(dir: &Path) -> PathBuf {
    let real = ["/usr/bin/curl", "/bin/curl", "/usr/local/bin/curl"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .expect("curl (scripts/services tools installs it)");
    let shim = dir.join("shim");
    std::fs::create_dir_all(&shim).unwrap();
    let curl = shim.join("curl");
    // An example's own -f (a wait loop) is kept: curl takes one or the other.
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in --fail*|-[!-]*f*) exec {real} \"$@\";; esac; done\n\
         exec {real} --fail-with-body \"$@\"\n"
    );
    std::fs::write(&curl, script).unwrap();
    let mut permissions = std::fs::metadata(&curl).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&curl, permissions).unwrap();
    shim
}

/// Runs `script` with bash in `dir`, with `env`; panics with its output
/// unless it succeeds.
fn bash_run(at: &str, script: &str, dir: &Path, env: &[(String, String)]) -> String {
    let shim = curl_strict(dir);
    let script = format!(
        "set -eo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n{script}"
    );
    let path = format!(
        "{}:{}:{}",
        shim.display(),
        bin_dir().display(),
        std::env::var("PATH").unwrap()
    );
    let mut child = Command::new("timeout")
        .args(["90", "bash", "-c", &script])
        .current_dir(dir)
        .env("PATH", path)
        .env("TICKLER_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // An interactive confirmation is answered yes.
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all("y\n".repeat(20).as_bytes());
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stderr = &stderr[stderr.len().saturating_sub(4000)..];
    assert!(
        output.status.success(),
        "{at}: the example fails ({}):\n--- script\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    stdout
}

/// What points an example at this test's world instead of a user's.
fn aimed(script: &str, base_url: &str) -> String {
    let host_port = base_url.trim_start_matches("http://");
    script
        .replace("https://tickler.internal:8443", base_url)
        .replace("localhost:8080", host_port)
        .replace("TICKLER_TOKEN=…", "TICKLER_TOKEN=$TOKEN")
        .replace("export PATH=\"$PWD/target/debug:$PATH\"", "")
}

fn env_of(env: &TestEnv) -> Vec<(String, String)> {
    let config = &env.config;
    vec![
        ("TICKLER_URL".into(), env.base_url.clone()),
        ("TICKLER_TOKEN".into(), env.admin_secret.clone()),
        ("TOKEN".into(), env.admin_secret.clone()),
        (
            "auth".into(),
            format!("authorization: Bearer {}", env.admin_secret),
        ),
        ("TICKLER_MYSQL_URL".into(), config.mysql.url.clone()),
        ("TICKLER_REDIS_URL".into(), config.redis.url.clone()),
        ("TICKLER_REDIS_PREFIX".into(), config.redis.prefix.clone()),
        ("TICKLER_KAFKA_BROKERS".into(), config.kafka.brokers.clone()),
        (
            "TICKLER_CLUSTER_SHARDS".into(),
            config.cluster.shards.to_string(),
        ),
        ("TICKLER_RESULTS_TOPIC".into(), config.results.topic.clone()),
        ("TICKLER_RESULTS_GROUP".into(), config.results.group.clone()),
    ]
}

/// The file's sh examples, `continued` ones joined to the one before.
fn shell_groups(file: &str) -> Vec<(Block, String)> {
    let mut groups: Vec<(Block, String)> = Vec::new();
    for block in blocks_in(file) {
        if !block.kind().starts_with("example: sh") {
            continue;
        }
        if block.has("continued") {
            let (_, script) = groups
                .last_mut()
                .unwrap_or_else(|| panic!("{}: continues nothing", block.at()));
            script.push_str(&block.text);
        } else {
            let text = block.text.clone();
            groups.push((block, text));
        }
    }
    groups
}

/// Runs every sh example of `file`; returns what each printed.
async fn shell_examples_run(file: &str) -> Vec<String> {
    topics_create().await;
    let mut printed = Vec::new();
    for (block, script) in shell_groups(file) {
        let dir = tickler_testkit::procs::scratch_dir();
        if block.has("own server") {
            // The example starts tickler itself: a database, a port and
            // a results topic of its own, and nothing running yet.
            let (db, url) = database_create().await;
            let port = tickler_testkit::procs::free_port();
            let base_url = format!("http://127.0.0.1:{port}");
            let env = vec![
                ("TICKLER_MYSQL_URL".to_owned(), url),
                ("TICKLER_API_ADDR".into(), format!("127.0.0.1:{port}")),
                ("TICKLER_URL".into(), base_url.clone()),
                ("TICKLER_REDIS_PREFIX".into(), unique("tickler-t-")),
                ("TICKLER_RESULTS_TOPIC".into(), unique("tickler-results-")),
                ("TICKLER_RESULTS_GROUP".into(), unique("tickler-t-")),
            ];
            let at = block.at();
            let script = aimed(&script, &base_url);
            let out = tokio::task::spawn_blocking(move || bash_run(&at, &script, &dir, &env))
                .await
                .unwrap();
            database_drop(&db).await;
            printed.push(out);
        } else {
            let env = TestEnv::start().await;
            given_make(&env, &given_parse(block.given())).await;
            let vars = env_of(&env);
            let at = block.at();
            let script = aimed(&script, &env.base_url);
            let out = tokio::task::spawn_blocking(move || bash_run(&at, &script, &dir, &vars))
                .await
                .unwrap();
            env.finish().await;
            printed.push(out);
        }
    }
    printed
}

// ---------------------------------------------------------------------
// Requests, queries, configuration.

/// Sends every request-body example of `file` to a tickler of its own.
async fn request_examples_run(file: &str) -> usize {
    let mut sent = 0;
    for block in blocks_in(file) {
        let kind = block.kind().trim_start_matches("example:").trim();
        let Some((method, path)) = kind.split_once(' ') else {
            continue;
        };
        if !["GET", "POST", "PATCH", "DELETE"].contains(&method) {
            continue;
        }
        topics_create().await;
        let env = TestEnv::start().await;
        given_make(&env, &given_parse(block.given())).await;
        serde_json::from_str::<Value>(&block.text)
            .unwrap_or_else(|e| panic!("{}: not JSON: {e}", block.at()));
        let (status, answer) = env.request(method, path, Some(block.text.clone())).await;
        assert!(
            (200..300).contains(&status),
            "{}: {method} {path} answers {status}: {answer}",
            block.at()
        );
        env.finish().await;
        sent += 1;
    }
    sent
}

async fn sql_examples_run(file: &str) -> usize {
    let mut run = 0;
    for block in blocks_in(file) {
        if block.kind() != "example: sql" {
            continue;
        }
        let env = TestEnv::start().await;
        given_make(&env, &given_parse(block.given())).await;
        sqlx::raw_sql(&block.text)
            .execute(&env.sql)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", block.at()));
        env.finish().await;
        run += 1;
    }
    run
}

/// Every toml example of `file` is a configuration `tickler config` takes,
/// and each setting it names comes out set.
fn toml_examples_run(file: &str) -> usize {
    let mut run = 0;
    for block in blocks_in(file) {
        if block.kind() != "example: toml" {
            continue;
        }
        let dir = tickler_testkit::procs::scratch_dir();
        let path = dir.join("tickler.toml");
        std::fs::write(&path, &block.text).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_tickler"))
            .arg("--config")
            .arg(&path)
            .arg("config")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{}: refused: {stderr}", block.at());
        let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
        let mut table: Option<String> = None;
        for line in block.text.lines().map(str::trim) {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[') {
                table = Some(name.trim_end_matches(']').to_owned());
                continue;
            }
            let key = line.split('=').next().unwrap().trim().trim_matches('"');
            let found = match &table {
                None => shown.get(key).is_some(),
                Some(name) => {
                    let (outer, inner) = match name.split_once('.') {
                        Some((outer, inner)) => (outer, Some(inner.trim_matches('"'))),
                        None => (name.as_str(), None),
                    };
                    let mut at = &shown[outer];
                    if let Some(inner) = inner {
                        at = &at[inner];
                    }
                    at.get(key).is_some()
                }
            };
            assert!(found, "{}: {key} ({table:?}) is not in {shown}", block.at());
        }
        run += 1;
    }
    run
}

fn result_records_parse(file: &str) -> usize {
    let mut parsed = 0;
    for block in blocks_in(file) {
        if block.kind() != "example: result record" {
            continue;
        }
        tickler::domain::outcome::report_parse(block.text.trim().as_bytes())
            .unwrap_or_else(|e| panic!("{}: the results topic refuses it: {e}", block.at()));
        parsed += 1;
    }
    parsed
}

fn rust_excerpts_check(file: &str) -> usize {
    let mut checked = 0;
    for block in blocks_in(file) {
        let Some(source) = block.kind().strip_prefix("example: rust, from ") else {
            continue;
        };
        let code = std::fs::read_to_string(Path::new(ROOT).join(source.trim()))
            .unwrap_or_else(|e| panic!("{}: {source}: {e}", block.at()));
        // Compared line by line, without the indentation of the function
        // the excerpt sits in.
        let strip =
            |text: &str| -> Vec<String> { text.lines().map(|l| l.trim().to_owned()).collect() };
        let (excerpt, code) = (strip(&block.text), strip(&code));
        let excerpt: Vec<_> = excerpt.into_iter().filter(|l| !l.is_empty()).collect();
        let code: Vec<_> = code.into_iter().filter(|l| !l.is_empty()).collect();
        assert!(
            code.windows(excerpt.len()).any(|w| w == excerpt.as_slice()),
            "{}: not an excerpt of {source} as it is",
            block.at()
        );
        checked += 1;
    }
    checked
}

// ---------------------------------------------------------------------
// One test per file.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_examples_run_as_written() {
    let printed = shell_examples_run("README.md").await;
    assert_eq!(printed.len(), 2, "the README's two runnable examples");
    let first = &printed[0];
    assert!(first.contains(r#""key":"order-42""#), "{first}");
    assert!(
        first.contains(r#""applied":true"#) && first.contains(r#""status":"succeeded""#),
        "the report was applied: {first}"
    );
    let used = &printed[1];
    assert!(
        used.contains("redrive") || used.contains(r#""status":"pending""#),
        "{used}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_examples_run_as_written() {
    shell_examples_run("docs/api.md").await;
    let sent = request_examples_run("docs/api.md").await;
    assert!(sent >= 5, "requests sent: {sent}");
}

#[test]
fn configuration_examples_are_taken_as_written() {
    assert!(toml_examples_run("docs/configuration.md") >= 1);
    assert!(toml_examples_run("docs/results.md") >= 1);
    assert!(toml_examples_run("docs/schedules.md") >= 1);
    assert!(toml_examples_run("docs/security.md") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_examples_run_as_written() {
    let printed = shell_examples_run("docs/cli.md").await;
    assert_eq!(printed.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_examples_run_as_written() {
    assert!(sql_examples_run("docs/schema.md").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_examples_run_as_written() {
    assert_eq!(shell_examples_run("docs/results.md").await.len(), 1);
    assert_eq!(result_records_parse("docs/results.md"), 1);
    assert_eq!(rust_excerpts_check("docs/results.md"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_examples_run_as_written() {
    assert_eq!(shell_examples_run("docs/schedules.md").await.len(), 1);
    assert_eq!(sql_examples_run("docs/schedules.md").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_examples_run_as_written() {
    assert_eq!(shell_examples_run("docs/security.md").await.len(), 2);
}

/// The harness itself: a block that fails, fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_in_an_example_fails_it() {
    let env = TestEnv::start().await;
    let vars = env_of(&env);
    let dir = tickler_testkit::procs::scratch_dir();
    let script = aimed(
        "curl -s localhost:8080/v1/jobs -H \"$auth\" -H 'content-type: application/json' -d '{\"topic\":\"\"}'\n",
        &env.base_url,
    );
    let failed = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(|| bash_run("test", &script, &dir, &vars)).is_err()
    })
    .await
    .unwrap();
    assert!(failed, "a 400 stops the example");
    env.finish().await;
}
