//! The OpenAPI description at `/v1/openapi.json` is generated from the
//! handlers, covers every route, and holds against a live server: an
//! independent tool (schemathesis) sends generated requests, valid and
//! not, and every answer must match its documented status, content type
//! and schema — and none may be a 5xx.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use tickler_testkit::TestEnv;

/// schemathesis's `st`: `TICKLER_SCHEMATHESIS`, or where scripts/services
/// installs it.
fn schemathesis() -> PathBuf {
    if let Some(path) = std::env::var_os("TICKLER_SCHEMATHESIS") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").expect("HOME is set");
    let st = PathBuf::from(home).join(".cache/tickler/venv/bin/st");
    assert!(
        st.exists(),
        "{} is missing: run scripts/services (it installs schemathesis)",
        st.display()
    );
    st
}

/// The document `env`'s tickler serves.
async fn spec_served(env: &TestEnv) -> Value {
    reqwest::get(format!("{}/v1/openapi.json", env.base_url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_is_served_to_anyone_and_covers_every_route() {
    let env = TestEnv::start().await;
    let response = reqwest::get(format!("{}/v1/openapi.json", env.base_url))
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "no token needed");
    let spec: Value = response.json().await.unwrap();
    assert!(
        spec["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        spec["openapi"]
    );
    let expected = [
        ("/v1/jobs", "post"),
        ("/v1/jobs", "get"),
        ("/v1/jobs/batch", "post"),
        ("/v1/jobs/{id}", "get"),
        ("/v1/jobs/{id}", "patch"),
        ("/v1/jobs/{id}", "delete"),
        ("/v1/jobs/{id}/history", "get"),
        ("/v1/jobs/{id}/result", "post"),
        ("/v1/jobs/{id}/redrive", "post"),
        ("/v1/jobs/bulk", "post"),
        ("/v1/bulk", "get"),
        ("/v1/bulk/{id}", "get"),
        ("/v1/stats", "get"),
        ("/healthz", "get"),
    ];
    for (path, method) in expected {
        let operation = &spec["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is not documented");
        let responses = operation["responses"].as_object().unwrap();
        assert!(
            responses.keys().any(|status| status.starts_with('2')),
            "{method} {path} documents no success"
        );
        if path != "/healthz" {
            assert!(
                responses.contains_key("400") && responses.contains_key("401"),
                "{method} {path}"
            );
        }
    }
    assert_eq!(
        spec["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    env.finish().await;
}

/// One schemathesis run: its exit status, its output, and its JUnit report
/// (where a check that failed is a `<failure>`, and an error of the tool
/// itself an `<error>`).
fn schemathesis_run(url: &str, auth: &str, examples: &str, seed: u64) -> (bool, String, String) {
    let dir = tickler_testkit::procs::scratch_dir();
    let junit = dir.join("schemathesis.xml");
    // Run through its venv's Python with a higher recursion limit: on
    // CPython 3.11, Hypothesis describing a strategy deep in schemathesis's
    // coverage walk can hit the limit inside `ast.parse`, which then fails
    // with "AST constructor recursion depth mismatch" (seen once in CI, on
    // every seed of the run).
    let st = schemathesis();
    let python = st.with_file_name("python3");
    let output = Command::new(&python)
        .args([
            "-c",
            "import sys; sys.setrecursionlimit(10000); sys.argv[0] = 'st'; \
             from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
        ])
        .args(["run", url, "-H", auth])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            "--max-examples",
            examples,
            "--seed",
            &seed.to_string(),
            // One thread: the AST error above was seen with two.
            "--workers",
            "1",
            "--generation-database",
            "none",
            "--no-color",
            "--report",
            "junit",
            "--report-junit-path",
        ])
        .arg(&junit)
        .env("SCHEMATHESIS_TELEMETRY", "false")
        // It keeps a cache where it runs: not in the repository.
        .current_dir(&dir)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let report = std::fs::read_to_string(&junit).unwrap_or_default();
    (output.status.success(), text, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_every_answer_as_documented_and_no_5xx() {
    let env = TestEnv::start().await;
    let url = format!("{}/v1/openapi.json", env.base_url);
    let auth = format!("Authorization: Bearer {}", env.admin_secret);
    let examples =
        std::env::var("TICKLER_SCHEMATHESIS_EXAMPLES").unwrap_or_else(|_| "25".to_owned());
    // A check that fails fails the test at once. The tool's own errors (its
    // generator is occasionally "flaky" by Hypothesis's standards, an
    // internal error unrelated to the answers) get two more runs, with
    // other seeds.
    let mut last = String::new();
    for seed in [20261122, 20261123, 20261124] {
        let (url, auth, examples) = (url.clone(), auth.clone(), examples.clone());
        let (ok, text, report) =
            tokio::task::spawn_blocking(move || schemathesis_run(&url, &auth, &examples, seed))
                .await
                .unwrap();
        println!("{text}");
        assert!(
            !report.contains("<failure"),
            "schemathesis found answers that do not match the spec (seed {seed}):\n{text}"
        );
        if ok {
            env.finish().await;
            return;
        }
        assert!(
            report.contains("<error"),
            "schemathesis failed without a report (seed {seed}):\n{text}"
        );
        last = text;
    }
    panic!("schemathesis errored on three seeds:\n{last}");
}

/// The served document passes an independent validator
/// (openapi-spec-validator, installed by `scripts/services tools`), and every
/// operation has its own operationId, noun first, saying what it does — as
/// client generators need (they name methods after them, and leave out
/// operations whose ids clash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_passes_an_independent_validator_and_names_each_operation_once() {
    let env = TestEnv::start().await;
    let spec = spec_served(&env).await;
    let mut ids = std::collections::BTreeMap::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has no operationId"))
                .to_owned();
            assert!(
                id.chars().all(|c| c.is_ascii_lowercase() || c == '_') && id.contains('_')
                    || id == "health",
                "{method} {path}: operationId {id:?} is not noun_verb"
            );
            if let Some(other) = ids.insert(id.clone(), format!("{method} {path}")) {
                panic!("operationId {id:?} names both {other} and {method} {path}");
            }
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                let name = parameter["name"].as_str().unwrap();
                if parameter["in"] == "path" {
                    assert!(
                        path.contains(&format!("{{{name}}}")),
                        "{method} {path}: {name} is declared in the path but is not in it"
                    );
                }
            }
        }
    }
    let file = std::env::temp_dir().join(format!("tickler-openapi-{}.json", std::process::id()));
    std::fs::write(&file, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    let validator = schemathesis().with_file_name("openapi-spec-validator");
    let output = Command::new(&validator)
        .arg(&file)
        .output()
        .unwrap_or_else(|err| {
            panic!(
                "{} runs (scripts/services tools): {err}",
                validator.display()
            )
        });
    let _ = std::fs::remove_file(&file);
    assert!(
        output.status.success(),
        "openapi-spec-validator:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    env.finish().await;
}

/// A client generated from the served document by a generator people use
/// (openapi-python-client, installed by `scripts/services tools`) drives
/// every operation the document names against a live server: each answers
/// 2xx and parses into the model the document promises
/// (tests/client/drive.py).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_generated_from_the_spec_drives_every_operation() {
    // `tickler dev`: every operation of `serve`, and the dev clock's.
    let env = TestEnv::start_dev_with(|_| {}).await;
    let spec = spec_served(&env).await;
    let mut operations = std::collections::BTreeSet::new();
    for item in spec["paths"].as_object().unwrap().values() {
        for operation in item.as_object().unwrap().values() {
            operations.insert(operation["operationId"].as_str().unwrap().to_owned());
        }
    }
    let dir = tickler_testkit::procs::scratch_dir();
    let spec_file = dir.join("openapi.json");
    std::fs::write(&spec_file, serde_json::to_vec(&spec).unwrap()).unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let generator = schemathesis().with_file_name("openapi-python-client");
    let output = Command::new(&generator)
        .args(["generate", "--meta", "none", "--path"])
        .arg(&spec_file)
        .arg("--output-path")
        .arg(dir.join("tickler_client"))
        .arg("--config")
        .arg(root.join("tests/client/generator.yaml"))
        .output()
        .unwrap_or_else(|err| {
            panic!(
                "{} runs (scripts/services tools): {err}",
                generator.display()
            )
        });
    let generated = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "openapi-python-client:\n{generated}"
    );
    // It names what it could not generate; nothing may be left out.
    assert!(
        !generated.contains("Unable to") && !generated.contains("will not be generated"),
        "openapi-python-client left something out:\n{generated}"
    );

    let python = schemathesis().with_file_name("python");
    let (env_url, secret, topic) = (
        env.base_url.clone(),
        env.admin_secret.clone(),
        env.topic.clone(),
    );
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(root.join("tests/client/drive.py"))
            .arg(&dir)
            .args([&env_url, &secret, &topic])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the generated client:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let driven: std::collections::BTreeSet<String> =
        serde_json::from_str(stdout.lines().last().unwrap_or("[]")).unwrap();
    let missing: Vec<_> = operations.difference(&driven).collect();
    assert!(
        missing.is_empty(),
        "operations the generated client does not drive (tests/client/drive.py): {missing:?}"
    );
    env.finish().await;
}
