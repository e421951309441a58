//! Encryption at rest (#46): with `encryption.active_key` set, payloads
//! and headers reach MySQL sealed (AES-256-GCM, the row's id bound in) —
//! by a single create, a batch, a PATCH and a schedule's occurrence — and
//! every other column stays plain; the API and Kafka see them as sent. A
//! ciphertext moved to another row does not open, and the job is set aside
//! unsent, never crashing a pass; `tickler keys rotate` seals everything
//! again under a new key, resumably; a key removed too soon is named by
//! the doctor. And no plaintext is left behind (#57): no table holds a
//! sealed job's payload or headers plain — not the audit log, not a
//! compression dictionary.

use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};
use tickler::config::Config;
use tickler_testkit::{output, output_text as text, records_read_keys, TestEnv};

fn key_files() -> (String, String) {
    let dir = tickler_testkit::scratch_dir();
    let one = dir.join("k1");
    let two = dir.join("k2");
    std::fs::write(&one, tickler::domain::keys::generate()).unwrap();
    std::fs::write(&two, [7u8; 32]).unwrap();
    (
        format!("file:{}", one.display()),
        format!("file:{}", two.display()),
    )
}

fn id_of(job: &Value) -> u64 {
    job["id"].as_u64().expect("a job id")
}

/// Runs `tickler ARGS` against `env` with `config`'s keys.
async fn tickler(env: &TestEnv, config: &Config, args: &[&str]) -> Output {
    let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
    command.args(args);
    if let Some(active) = &config.encryption.active_key {
        command.env("TICKLER_ENCRYPTION_ACTIVE_KEY", active);
    }
    let keys: Vec<String> = config
        .encryption
        .keys
        .iter()
        .map(|(id, source)| format!("{id}=\"{source}\""))
        .collect();
    command.env(
        "TICKLER_ENCRYPTION_KEYS",
        format!("{{{}}}", keys.join(", ")),
    );
    output(command).await
}

/// (payload, headers, enc_key) as MySQL holds them.
async fn stored(env: &TestEnv, id: u64) -> (Vec<u8>, Option<String>, Option<String>) {
    let row: (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>) =
        sqlx::query_as("SELECT payload, headers, enc_key FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&env.sql)
            .await
            .unwrap();
    let text = |bytes: Option<Vec<u8>>| bytes.map(|b| String::from_utf8(b).unwrap());
    (row.0, text(row.1), text(row.2))
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_and_headers_are_sealed_at_rest_and_arrive_plain() {
    let (k1, _) = key_files();
    let env = TestEnv::start_with(move |c| {
        c.encryption.active_key = Some("k1".to_owned());
        c.encryption.keys.insert("k1".to_owned(), k1);
    })
    .await;
    let consumer = env.consumer();
    let secret = "card-4242-4242";
    let single = env
        .job_create(json!({"key": "single", "payload": {"card": secret},
            "headers": {"customer": "alice-secret"}, "delay_ms": 2_000}))
        .await;
    let (status, batch) = env
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [
                {"topic": env.topic, "key": "b1", "payload": {"card": secret}, "delay_ms": 2_000},
                {"topic": env.topic, "key": "b2", "payload_base64": "AAEC", "delay_ms": 3_600_000,
                 "headers": {"customer": "bob-secret"}}]}),
        )
        .await;
    assert_eq!(status, 200, "{batch}");
    let later = batch["results"][1]["id"].as_u64().unwrap();
    // PATCH of the headers alone: the payload is sealed again with them.
    let (status, patched) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{later}"),
            Some(json!({"version": 1, "headers": {"customer": "carol-secret"}}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{patched}");

    for id in [
        id_of(&single),
        batch["results"][0]["id"].as_u64().unwrap(),
        later,
    ] {
        let (payload, headers, key) = stored(&env, id).await;
        assert_eq!(key.as_deref(), Some("k1"), "job {id}");
        assert!(
            !contains(&payload, secret),
            "job {id}: no plain payload in MySQL"
        );
        assert!(
            !headers.unwrap_or_default().contains("secret"),
            "job {id}: no plain headers in MySQL"
        );
    }
    // Every other column stays plain: a SQL recipe still reads them.
    let (topic, job_key, status_text): (String, String, String) = sqlx::query_as(
        "SELECT CAST(topic AS CHAR), CAST(job_key AS CHAR), CAST(status AS CHAR) FROM jobs WHERE id = ?",
    )
    .bind(later)
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!(
        (topic.as_str(), job_key.as_str(), status_text.as_str()),
        (env.topic.as_str(), "b2", "pending")
    );
    // The API answers them as sent.
    let (_, read) = env.get(&format!("/v1/jobs/{later}")).await;
    assert_eq!(read["payload_base64"], json!("AAEC"), "{read}");
    assert_eq!(read["headers"]["customer"], json!("carol-secret"), "{read}");

    // A schedule's occurrences are sealed as they become jobs.
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "digest", "payload": {"card": secret},
                "every_ms": 3_600_000, "start_at": "2030-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let occurrence: u64 = tickler_testkit::eventually(Duration::from_secs(10), || async {
        sqlx::query_scalar("SELECT id FROM jobs WHERE schedule_id IS NOT NULL LIMIT 1")
            .fetch_optional(&env.sql)
            .await
            .unwrap()
    })
    .await
    .expect("an occurrence materialized");
    let (payload, _, key) = stored(&env, occurrence).await;
    assert_eq!(key.as_deref(), Some("k1"));
    assert!(!contains(&payload, secret));
    // The schedule's own template too, bound to the schedule's row.
    let schedule_id = schedule["id"].as_u64().unwrap();
    let (template, schedule_key): (Vec<u8>, Option<Vec<u8>>) =
        sqlx::query_as("SELECT payload, enc_key FROM schedules WHERE id = ?")
            .bind(schedule_id)
            .fetch_one(&env.sql)
            .await
            .unwrap();
    assert_eq!(schedule_key.as_deref(), Some(&b"k1"[..]));
    assert!(!contains(&template, secret));
    let (_, shown) = env.get(&format!("/v1/schedules/{schedule_id}")).await;
    assert_eq!(shown["payload"], json!({"card": secret}), "{shown}");
    // Changed, its pending occurrences follow, each sealed under its id.
    let (status, changed) = env
        .request(
            "PATCH",
            &format!("/v1/schedules/{schedule_id}"),
            Some(
                json!({"version": shown["version"], "payload": {"card": "new-secret"}}).to_string(),
            ),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    let (_, job) = env.get(&format!("/v1/jobs/{occurrence}")).await;
    assert_eq!(job["payload"], json!({"card": "new-secret"}), "{job}");
    let (payload, _, key) = stored(&env, occurrence).await;
    assert_eq!(key.as_deref(), Some("k1"));
    assert!(!contains(&payload, "new-secret"));

    // The instance said which key it seals with, for the doctor.
    let used: Vec<String> = sqlx::query_scalar("SELECT CAST(key_id AS CHAR) FROM enc_keys_used")
        .fetch_all(&env.sql)
        .await
        .unwrap();
    assert_eq!(used, ["k1"]);

    // Kafka receives them plain.
    let records = records_read_keys(&consumer, 2, Duration::from_secs(20)).await;
    let record = records
        .iter()
        .find(|r| r.key.as_deref() == Some("single"))
        .expect("the single job arrived");
    let payload: Value = serde_json::from_slice(&record.payload).unwrap();
    assert_eq!(payload, json!({"card": secret}));
    assert_eq!(record.header("customer"), Some("alice-secret"));
    assert!(records.iter().any(|r| r.key.as_deref() == Some("b1")));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_ciphertext_is_set_aside_rotation_resumes_and_a_missing_key_is_named() {
    let (k1, k2) = key_files();
    let (first, second) = (k1.clone(), k2.clone());
    let mut env = TestEnv::start_with(move |c| {
        c.encryption.active_key = Some("k1".to_owned());
        c.encryption.keys.insert("k1".to_owned(), first);
    })
    .await;
    // A few plain rows from before encryption, written as an operator's
    // SQL would (or an older tickler).
    let mut ids = Vec::new();
    for n in 0..6 {
        let job = env
            .job_create(
                json!({"key": format!("j{n}"), "payload": {"n": n, "s": "secret"},
                "headers": {"h": format!("v{n}")}, "delay_ms": 3_600_000}),
            )
            .await;
        ids.push(id_of(&job));
    }
    sqlx::query(
        "UPDATE jobs SET payload = '{\"n\":99}', headers = NULL, enc_key = NULL WHERE id = ?",
    )
    .bind(ids[5])
    .execute(&env.sql)
    .await
    .unwrap();

    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "sched", "payload": "template",
                "every_ms": 3_600_000, "start_at": "2030-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");

    // Job 1's ciphertext copied onto job 0: it does not open there.
    sqlx::query(
        "UPDATE jobs a JOIN jobs b ON b.id = ? SET a.payload = b.payload, \
         a.schedule_time = UTC_TIMESTAMP(3) WHERE a.id = ?",
    )
    .bind(ids[1])
    .bind(ids[0])
    .execute(&env.sql)
    .await
    .unwrap();
    // Read through the API: an error naming the row, never the wrong
    // payload.
    let (status, body) = env.get(&format!("/v1/jobs/{}", ids[0])).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (500, &json!("unreadable_row")),
        "{body}"
    );
    // Due now: the dispatcher sets it aside, and goes on with the others.
    env.status_await(ids[0], "dead", Duration::from_secs(20))
        .await;
    let error: String =
        sqlx::query_scalar("SELECT CAST(last_error AS CHAR) FROM jobs WHERE id = ?")
            .bind(ids[0])
            .fetch_one(&env.sql)
            .await
            .unwrap();
    assert!(
        error.starts_with("unreadable row: ") && error.contains("does not open under key \"k1\""),
        "{error}"
    );
    let later = env
        .job_create(json!({"key": "after", "payload": 1, "delay_ms": 0}))
        .await;
    env.status_await(id_of(&later), "dispatched", Duration::from_secs(20))
        .await;

    // Rotate to k2, keeping k1 to read with: stopped after 2 rows, resumed.
    env.stop().await;
    let (first, second_key) = (k1.clone(), k2.clone());
    env.config.encryption.active_key = Some("k2".to_owned());
    env.config.encryption.keys.insert("k1".to_owned(), first);
    env.config
        .encryption
        .keys
        .insert("k2".to_owned(), second_key);
    env.restart().await;
    let config = env.config.clone();
    let part = tickler(
        &env,
        &config,
        &["keys", "rotate", "--max-rows", "2", "--rate", "2"],
    )
    .await;
    assert!(part.status.success(), "{}", text(&part));
    assert!(
        text(&part).contains("run it again to go on"),
        "{}",
        text(&part)
    );
    let rest = tickler(&env, &config, &["keys", "rotate"]).await;
    assert!(rest.status.success(), "{}", text(&rest));
    let done = text(&rest);
    assert!(
        text(&part).contains("to k2: 1 schedules rewritten, 0 skipped"),
        "{}",
        text(&part)
    );
    assert!(done.contains("done:"), "{done}");
    let under: Vec<(Option<String>, i64)> = sqlx::query_as(
        "SELECT CAST(enc_key AS CHAR), COUNT(*) FROM jobs GROUP BY enc_key ORDER BY enc_key",
    )
    .fetch_all(&env.sql)
    .await
    .unwrap();
    // Everything under k2 but job 0, whose payload opens nowhere.
    let total: i64 = under.iter().map(|(_, n)| n).sum();
    assert_eq!(
        under,
        vec![
            (Some("k1".to_owned()), 1),
            (Some("k2".to_owned()), total - 1)
        ],
        "{done}"
    );
    for id in &ids[1..] {
        let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(job["status"], json!("pending"), "{job}");
    }
    let (_, plain) = env.get(&format!("/v1/jobs/{}", ids[5])).await;
    assert_eq!(
        plain["payload"],
        json!({"n": 99}),
        "the plain row, sealed and read"
    );
    let (_, headers) = env.get(&format!("/v1/jobs/{}", ids[2])).await;
    assert_eq!(headers["headers"]["h"], json!("v2"), "{headers}");
    let (_, read) = env
        .get(&format!(
            "/v1/schedules/{}",
            schedule["id"].as_u64().unwrap()
        ))
        .await;
    assert_eq!(read["payload"], json!("template"), "{read}");
    let rotations: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM audit_log WHERE action = 'keys.rotate' AND target = 'k2' AND actor = 'cli'",
    )
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!(rotations, 2, "each run is in the audit log");
    let status = tickler(&env, &config, &["keys", "status"]).await;
    assert!(
        text(&status).contains("active key: k2"),
        "{}",
        text(&status)
    );

    // k1 removed while a row is still under it: the doctor names it.
    let mut without = config.clone();
    without.encryption.keys.remove("k1");
    let doctor = tickler(&env, &without, &["doctor", "--json"]).await;
    let report = text(&doctor);
    assert!(
        report.contains(r#"rows are sealed under keys this configuration lacks: \"k1\""#),
        "{report}"
    );
    assert!(!doctor.status.success());
    // Its count, exact, from a read of every row.
    let status = tickler(&env, &config, &["keys", "status"]).await;
    assert!(text(&status).contains("1 rows  k1"), "{}", text(&status));
    // No key material in anything said.
    let raw = std::fs::read_to_string(k1.trim_start_matches("file:")).unwrap();
    for said in [&report, &done] {
        assert!(!said.contains(raw.trim()), "a key was printed");
    }
    let _ = second;
    env.finish().await;
}

/// A rotation that leaves nothing under the old key forgets it, once no
/// process has said it seals with it for a while: the doctor, which
/// reads `enc_keys_used` and never the whole table, stops naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_rotation_forgets_the_old_key_for_the_doctor() {
    let (k1, k2) = key_files();
    let first = k1.clone();
    let mut env = TestEnv::start_with(move |c| {
        c.encryption.active_key = Some("k1".to_owned());
        c.encryption.keys.insert("k1".to_owned(), first);
    })
    .await;
    for n in 0..3 {
        env.job_create(json!({"key": format!("r{n}"), "payload": {"n": n}, "delay_ms": 3_600_000}))
            .await;
    }
    env.stop().await;
    env.config.encryption.active_key = Some("k2".to_owned());
    env.config.encryption.keys.insert("k2".to_owned(), k2);
    let config = env.config.clone();
    // Recently sealed with: a complete rotation keeps it named.
    let rotated = tickler(&env, &config, &["keys", "rotate"]).await;
    assert!(rotated.status.success(), "{}", text(&rotated));
    let used = |env: &TestEnv| {
        let sql = env.sql.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT CAST(key_id AS CHAR) FROM enc_keys_used ORDER BY key_id",
            )
            .fetch_all(&sql)
            .await
            .unwrap()
        }
    };
    assert_eq!(used(&env).await, ["k1", "k2"]);
    // Quiet for an hour (as if): the next complete rotation forgets it.
    sqlx::query("UPDATE enc_keys_used SET last_at = last_at - INTERVAL 1 HOUR WHERE key_id = 'k1'")
        .execute(&env.sql)
        .await
        .unwrap();
    let rotated = tickler(&env, &config, &["keys", "rotate", "--restart"]).await;
    assert!(
        text(&rotated).contains("key k1 no longer in use"),
        "{}",
        text(&rotated)
    );
    assert_eq!(used(&env).await, ["k2"]);
    let mut without = config.clone();
    without.encryption.keys.remove("k1");
    let doctor = tickler(&env, &without, &["doctor", "--json"]).await;
    let report = text(&doctor);
    assert!(
        report.contains("rows are sealed under k2, every one a key this configuration has"),
        "{report}"
    );
    env.finish().await;
}

/// Where `markers` are found in the test's database: every column of
/// every table (information_schema's list, so a table added later is
/// searched too), each value's raw bytes, as `table.column: marker`.
async fn markers_stored(env: &TestEnv, markers: &[&str]) -> Vec<String> {
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME, ORDINAL_POSITION",
    )
    .fetch_all(&env.sql)
    .await
    .unwrap();
    assert!(columns.len() > 50, "every table's columns: {columns:?}");
    let mut found = Vec::new();
    for (table, column) in columns {
        let values: Vec<Option<Vec<u8>>> =
            sqlx::query_scalar(&format!("SELECT CAST(`{column}` AS BINARY) FROM `{table}`"))
                .fetch_all(&env.sql)
                .await
                .unwrap();
        for marker in markers {
            if values.iter().flatten().any(|value| contains(value, marker)) {
                found.push(format!("{table}.{column}: {marker}"));
            }
        }
    }
    found
}

/// Issue 57: with encryption at rest on, a sealed job's payload and
/// headers are plain nowhere in MySQL — not in the audit rows of a bulk
/// preview (its sample), a redrive (the job before and after), a bulk
/// redrive, a schedule's create, change, pause and delete (its template),
/// nor in a dictionary `tickler compression train` makes (it passes
/// sealed payloads over) — and the webhook's secret path is not in the
/// start-up's row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_plaintext_of_a_sealed_job_is_left_anywhere_in_mysql() {
    let (k1, _) = key_files();
    let marker = tickler_testkit::unique("plainmarker");
    let hook_secret = tickler_testkit::unique("hooksecret");
    let key_source = k1.clone();
    let hook = format!("http://127.0.0.1:9/services/T000/B000/{hook_secret}");
    let env = TestEnv::start_with(move |c| {
        c.encryption.active_key = Some("k1".to_owned());
        c.encryption.keys.insert("k1".to_owned(), key_source);
        c.notify.webhook_url = Some(hook);
    })
    .await;
    let topic = env.topic.clone();
    // A control: rows written plain by hand, to train on, one of them
    // marked — the search finds what is there.
    let control = tickler_testkit::unique("controlmarker");
    for i in 0..150 {
        let note = if i == 0 {
            control.clone()
        } else {
            format!("plain note {i}")
        };
        sqlx::query(
            "INSERT INTO jobs (topic, payload, payload_kind, schedule_time) \
             VALUES (?, ?, 'json', UTC_TIMESTAMP(3) + INTERVAL 1 YEAR)",
        )
        .bind(&topic)
        .bind(
            json!({"template": format!("reminder_v{}", i % 5), "locale": "en-GB", "note": note})
                .to_string(),
        )
        .execute(&env.sql)
        .await
        .unwrap();
    }
    // Sealed jobs, payload and headers (a name and a value) marked.
    let jobs: Vec<Value> = (0..120)
        .map(|i| {
            json!({"topic": topic, "key": format!("m-{i}"), "delay_ms": 3_600_000,
                   "payload": {"note": format!("{marker} {i}"), "template": "reminder_v1"},
                   "headers": {"x-note": marker, format!("x-{marker}"): "1"}})
        })
        .collect();
    let (status, batch) = env.post("/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(status, 200, "{batch}");
    let ids: Vec<u64> = batch["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().expect("created"))
        .collect();

    // A bulk preview: its sample carries the headers, to the caller only.
    let (status, preview) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": {"topic": topic, "key_prefix": "m-"}, "action": {"type": "cancel"}, "dry_run": true}),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(
        preview["sample"][0]["headers"]["x-note"],
        json!(marker),
        "{preview}"
    );

    // Dead jobs (by hand), redriven one by one and in bulk, previewed too.
    sqlx::query("UPDATE jobs SET status = 'dead', last_error = 'failed' WHERE id IN (?, ?, ?)")
        .bind(ids[0])
        .bind(ids[1])
        .bind(ids[2])
        .execute(&env.sql)
        .await
        .unwrap();
    let (status, redriven) = env
        .post(&format!("/v1/jobs/{}/redrive", ids[0]), json!({}))
        .await;
    assert_eq!(status, 200, "{redriven}");
    let dead_filter = json!({"topic": topic, "status": "dead", "key_prefix": "m-"});
    let (status, preview) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": dead_filter, "action": {"type": "redrive"}, "dry_run": true}),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    let (status, started) = env
        .post(
            "/v1/jobs/bulk",
            json!({"filter": dead_filter, "action": {"type": "redrive"}, "dry_run": false}),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let op = started["id"].as_u64().unwrap();
    tickler_testkit::eventually(Duration::from_secs(30), || async {
        let (_, op) = env.get(&format!("/v1/bulk/{op}")).await;
        (op["status"] != "running").then_some(())
    })
    .await
    .expect("the bulk redrive finished");
    env.status_await(ids[0], "dispatched", Duration::from_secs(20))
        .await;

    // Schedules: created, changed, paused, resumed, deleted.
    let template = |n: u32| {
        json!({"topic": topic, "key": format!("digest-{n}"), "every_ms": 3_600_000,
               "start_at": "2030-01-01T00:00:00Z",
               "payload": {"note": format!("{marker} schedule {n}")},
               "headers": {"x-note": marker, format!("x-{marker}"): "1"}})
    };
    let mut schedules = Vec::new();
    for n in 0..2 {
        let (status, schedule) = env.post("/v1/schedules", template(n)).await;
        assert_eq!(status, 201, "{schedule}");
        schedules.push(schedule);
    }
    let id = schedules[0]["id"].as_u64().unwrap();
    let (status, changed) = env
        .request(
            "PATCH",
            &format!("/v1/schedules/{id}"),
            Some(
                json!({"version": schedules[0]["version"],
                       "payload": {"note": format!("{marker} changed")},
                       "headers": {"x-note": format!("{marker} changed")}})
                .to_string(),
            ),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    for action in ["pause", "resume"] {
        let (status, body) = env
            .post(&format!("/v1/schedules/{id}/{action}"), json!({}))
            .await;
        assert_eq!(status, 200, "{action}: {body}");
    }
    let gone = schedules[1]["id"].as_u64().unwrap();
    let (status, body) = env
        .request("DELETE", &format!("/v1/schedules/{gone}"), None)
        .await;
    assert!((200..300).contains(&status), "{status} {body}");

    // A dictionary: from the plain rows only, the sealed ones passed over.
    let trained = tickler(
        &env,
        &env.config,
        &["compression", "train", "--samples", "1000"],
    )
    .await;
    assert!(trained.status.success(), "{}", text(&trained));
    assert!(
        text(&trained).contains("of the newest 1000 jobs are sealed"),
        "{}",
        text(&trained)
    );

    // Each write that audits left its row.
    let audited: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT CAST(action AS CHAR) FROM audit_log ORDER BY 1")
            .fetch_all(&env.sql)
            .await
            .unwrap();
    for action in [
        "bulk.preview",
        "bulk.start",
        "compression.train",
        "instance.start",
        "job.redrive",
        "schedule.create",
        "schedule.delete",
        "schedule.modify",
        "schedule.pause",
        "schedule.resume",
    ] {
        assert!(
            audited.iter().any(|a| a == action),
            "{action} in {audited:?}"
        );
    }
    let found = markers_stored(&env, &[&marker, &hook_secret, &control]).await;
    assert!(
        found.contains(&format!("jobs.payload: {control}")),
        "the search finds the control, written plain by hand: {found:?}"
    );
    let leaked: Vec<&String> = found
        .iter()
        .filter(|at| at.ends_with(&marker) || at.ends_with(&hook_secret))
        .collect();
    assert!(leaked.is_empty(), "plain in MySQL: {leaked:?}");
    env.finish().await;
}
