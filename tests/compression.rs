//! Payload compression at rest (#48): with `compression.payloads = "zstd"`
//! payloads reach MySQL compressed — plain zstd at first, then with the
//! dictionary `tickler compression train` makes from the newest payloads
//! — and the API and Kafka see them as sent. Rows written before, rows
//! edited by hand (`payload_kind = 'json'`) and sealed rows read as ever; a
//! row whose dictionary an instance has not loaded waits, never dies.

use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};
use tickler_testkit::{eventually, output, output_text as text, records_read_keys, TestEnv};

/// A payload like a reminder service's: ~220 bytes of JSON, different
/// each time, with the same field names and the same few values.
fn payload(i: u64) -> Value {
    let words = [
        "reminder", "invoice", "renewal", "trial", "payment", "survey",
    ];
    let locale = ["en-GB", "de-DE", "fr-FR"][i as usize % 3];
    let channel = ["email", "sms", "push"][(i / 3) as usize % 3];
    json!({
        "user_id": i.wrapping_mul(2_654_435_761) % 1_000_000_007,
        "order_id": format!("{:08x}-4a1b-9c2d-{:012x}", i.wrapping_mul(40_503) as u32, i * 7_919),
        "template": format!("{}_v{}", words[i as usize % 6], i % 5),
        "locale": locale,
        "channel": channel,
        "amount": (i % 50_000) as f64 / 100.0,
        "currency": "EUR",
        "note": format!("{} {} {}", words[(i / 6) as usize % 6], words[(i / 36) as usize % 6], words[(i / 7) as usize % 6]),
    })
}

/// How MySQL holds job `id`'s payload: its length, and the dictionary it
/// is compressed with (0: none) when its kind says it is (`json+zstd`).
async fn stored(env: &TestEnv, id: u64) -> (i64, Option<u16>) {
    let (kind, payload): (String, Vec<u8>) =
        sqlx::query_as("SELECT CAST(payload_kind AS CHAR), payload FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&env.sql)
            .await
            .unwrap();
    let dict = kind
        .ends_with("+zstd")
        .then(|| u16::from_be_bytes([payload[0], payload[1]]));
    (payload.len() as i64, dict)
}

/// Runs `tickler ARGS` against `env`, compression on.
async fn tickler(env: &TestEnv, args: &[&str]) -> Output {
    let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
    command
        .args(args)
        .env("TICKLER_COMPRESSION_PAYLOADS", "zstd");
    output(command).await
}

async fn batch(env: &TestEnv, from: u64, n: u64, delay_ms: u64) -> Vec<u64> {
    let jobs: Vec<Value> = (from..from + n)
        .map(|i| json!({"topic": env.topic, "key": format!("k{i}"), "payload": payload(i), "delay_ms": delay_ms}))
        .collect();
    let (status, body) = env.post("/v1/jobs/batch", json!({ "jobs": jobs })).await;
    assert_eq!(status, 200, "{body}");
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().expect("created"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_are_stored_compressed_with_a_trained_dictionary_and_arrive_as_sent() {
    let env = compressing().await;
    let consumer = env.consumer();

    // No dictionary yet: plain zstd, a little smaller.
    let first = batch(&env, 0, 400, 3_600_000).await;
    let plain_len = serde_json::to_vec(&payload(0)).unwrap().len() as i64;
    let (len, zstd) = stored(&env, first[0]).await;
    assert_eq!(zstd, Some(0), "compressed without a dictionary");
    assert!(len < plain_len, "{len} < {plain_len}");
    let (_, read) = env.get(&format!("/v1/jobs/{}", first[0])).await;
    assert_eq!(read["payload"], payload(0), "{read}");

    // A dictionary from the newest payloads.
    let trained = tickler(&env, &["compression", "train", "--samples", "400"]).await;
    assert!(trained.status.success(), "{}", text(&trained));
    assert!(
        text(&trained).contains("dictionary 1:"),
        "{}",
        text(&trained)
    );
    let (dicts, audited): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM payload_dicts), \
         (SELECT COUNT(*) FROM audit_log WHERE action = 'compression.train')",
    )
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!((dicts, audited), (1, 1));

    // Every instance loads it within seconds, and writes with it.
    let with_dict = eventually(Duration::from_secs(15), || async {
        let id = batch(&env, 10_000 + rand_suffix(), 1, 3_600_000).await[0];
        (stored(&env, id).await.1 == Some(1)).then_some(id)
    })
    .await
    .expect("new payloads written with dictionary 1");
    let (len, _) = stored(&env, with_dict).await;
    assert!(
        len * 2 < plain_len,
        "with the dictionary: {len} bytes of {plain_len}"
    );

    // Due now, compressed with the dictionary: Kafka gets it as sent.
    let (status, due) = env
        .post(
            "/v1/jobs",
            json!({"topic": env.topic, "key": "due", "payload": payload(77), "delay_ms": 200}),
        )
        .await;
    assert_eq!(status, 201, "{due}");
    assert_eq!(stored(&env, due["id"].as_u64().unwrap()).await.1, Some(1));
    let records = records_read_keys(&consumer, 1, Duration::from_secs(20)).await;
    let record = records
        .iter()
        .find(|r| r.key.as_deref() == Some("due"))
        .expect("due arrived");
    assert_eq!(
        serde_json::from_slice::<Value>(&record.payload).unwrap(),
        payload(77)
    );

    // A PATCH of the headers alone keeps the payload, compressed again.
    let (status, patched) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{}", first[1]),
            Some(json!({"version": 1, "headers": {"h": "v"}}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(stored(&env, first[1]).await.1, Some(1));
    let (_, read) = env.get(&format!("/v1/jobs/{}", first[1])).await;
    assert_eq!(
        (&read["payload"], &read["headers"]["h"]),
        (&payload(1), &json!("v")),
        "{read}"
    );

    // A hand edit writes the payload as given, of kind 'json'.
    sqlx::query(
        "UPDATE jobs SET payload = '{\"by\":\"hand\"}', payload_kind = 'json' WHERE id = ?",
    )
    .bind(first[2])
    .execute(&env.sql)
    .await
    .unwrap();
    let (_, read) = env.get(&format!("/v1/jobs/{}", first[2])).await;
    assert_eq!(read["payload"], json!({"by": "hand"}), "{read}");

    // A schedule's occurrences are compressed as they become jobs; a
    // change of the schedule writes them again as given.
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "digest", "payload": payload(5),
                "every_ms": 3_600_000, "start_at": "2030-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let occurrence: u64 = eventually(Duration::from_secs(10), || async {
        sqlx::query_scalar("SELECT id FROM jobs WHERE schedule_id IS NOT NULL LIMIT 1")
            .fetch_optional(&env.sql)
            .await
            .unwrap()
    })
    .await
    .expect("an occurrence");
    assert_eq!(stored(&env, occurrence).await.1, Some(1));
    let (status, changed) = env
        .request(
            "PATCH",
            &format!("/v1/schedules/{}", schedule["id"]),
            Some(json!({"version": schedule["version"], "payload": payload(6)}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(stored(&env, occurrence).await.1, None);
    let (_, read) = env.get(&format!("/v1/jobs/{occurrence}")).await;
    assert_eq!(read["payload"], payload(6), "{read}");

    let status = tickler(&env, &["compression", "status", "--sample", "100"]).await;
    assert!(status.status.success(), "{}", text(&status));
    assert!(text(&status).contains("dictionary 1:"), "{}", text(&status));
    env.finish().await;
}

/// A tickler compressing payloads, writing with a new dictionary at once.
async fn compressing() -> TestEnv {
    TestEnv::start_with(|c| {
        c.compression.payloads = tickler::config::PayloadCompression::Zstd;
        c.compression.dict_delay_ms = 0;
    })
    .await
}

fn rand_suffix() -> u64 {
    rand::random::<u32>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_dictionary_is_absent_is_set_aside_and_sent_once_repaired() {
    let env = compressing().await;
    let consumer = env.consumer();
    batch(&env, 0, 300, 3_600_000).await;
    let trained = tickler(&env, &["compression", "train", "--samples", "300"]).await;
    assert!(trained.status.success(), "{}", text(&trained));
    let id = eventually(Duration::from_secs(15), || async {
        let id = batch(&env, 20_000 + rand_suffix(), 1, 3_600_000).await[0];
        (stored(&env, id).await.1 == Some(1)).then_some(id)
    })
    .await
    .expect("written with dictionary 1");

    // A row naming dictionary 9, which is not in payload_dicts: no
    // instance writes with a dictionary before it is there (a restore
    // without its dictionaries, a hand edit).
    sqlx::query(
        "UPDATE jobs SET payload = CONCAT(UNHEX('0009'), SUBSTRING(payload, 3)), \
         schedule_time = UTC_TIMESTAMP(3), job_key = 'late' \
         WHERE id = ?",
    )
    .bind(id)
    .execute(&env.sql)
    .await
    .unwrap();
    // Read: the dictionaries are loaded afresh, and 9 is not among them:
    // a broken row, answered as such at once (not a wait without end).
    let (status, body) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (500, Some("unreadable_row")),
        "{body}"
    );
    env.status_await(id, "dead", Duration::from_secs(30)).await;
    let error: String =
        sqlx::query_scalar("SELECT CAST(last_error AS CHAR) FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&env.sql)
            .await
            .unwrap();
    assert!(
        error.contains("dictionary 9 is not in payload_dicts"),
        "{error}"
    );

    // Repaired (the dictionary restored, a copy of 1 as 9) and redriven:
    // the job goes out as sent.
    sqlx::query(
        "INSERT INTO payload_dicts (id, dict, samples, sample_bytes, created_at) \
         SELECT 9, dict, samples, sample_bytes, UTC_TIMESTAMP(3) FROM payload_dicts WHERE id = 1",
    )
    .execute(&env.sql)
    .await
    .unwrap();
    let (status, body) = env
        .request(
            "POST",
            &format!("/v1/jobs/{id}/redrive"),
            Some("{}".to_owned()),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let records = records_read_keys(&consumer, 1, Duration::from_secs(30)).await;
    let record = records
        .iter()
        .find(|r| r.key.as_deref() == Some("late"))
        .expect("sent once loaded");
    let sent: Value = serde_json::from_slice(&record.payload).unwrap();
    assert_eq!(sent["currency"], json!("EUR"), "{sent}");
    env.finish().await;
}

/// With encryption at rest on too: compressed, then sealed; a rotation to
/// another key seals the compressed bytes again, and every read gives the
/// payload as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_then_sealed_and_rotated_read_as_sent() {
    let dir = tickler_testkit::scratch_dir();
    let (one, two) = (dir.join("k1"), dir.join("k2"));
    std::fs::write(&one, tickler::domain::keys::generate()).unwrap();
    std::fs::write(&two, tickler::domain::keys::generate()).unwrap();
    let k1 = format!("file:{}", one.display());
    let k2 = format!("file:{}", two.display());
    let first = k1.clone();
    let mut env = TestEnv::start_with(move |c| {
        c.compression.payloads = tickler::config::PayloadCompression::Zstd;
        c.encryption.active_key = Some("k1".to_owned());
        c.encryption.keys.insert("k1".to_owned(), first);
    })
    .await;
    let consumer = env.consumer();
    let ids = batch(&env, 0, 3, 3_600_000).await;
    let (status, single) = env
        .post(
            "/v1/jobs",
            json!({"topic": env.topic, "key": "single", "payload": payload(9), "delay_ms": 1_000}),
        )
        .await;
    assert_eq!(status, 201, "{single}");
    let sql = env.sql.clone();
    let key_of = |id: u64| {
        let sql = sql.clone();
        async move {
            sqlx::query_as::<_, (Option<String>, String)>(
                "SELECT CAST(enc_key AS CHAR), CAST(payload_kind AS CHAR) FROM jobs WHERE id = ?",
            )
            .bind(id)
            .fetch_one(&sql)
            .await
            .unwrap()
        }
    };
    assert_eq!(
        key_of(ids[0]).await,
        (Some("k1".to_owned()), "json+zstd".to_owned())
    );
    assert_eq!(
        key_of(single["id"].as_u64().unwrap()).await,
        (Some("k1".to_owned()), "json+zstd".to_owned())
    );
    let records = records_read_keys(&consumer, 1, Duration::from_secs(20)).await;
    let record = records
        .iter()
        .find(|r| r.key.as_deref() == Some("single"))
        .expect("arrived");
    assert_eq!(
        serde_json::from_slice::<Value>(&record.payload).unwrap(),
        payload(9)
    );

    env.stop().await;
    env.config.encryption.active_key = Some("k2".to_owned());
    env.config
        .encryption
        .keys
        .insert("k2".to_owned(), k2.clone());
    let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
    command
        .args(["keys", "rotate"])
        .env("TICKLER_ENCRYPTION_ACTIVE_KEY", "k2")
        .env(
            "TICKLER_ENCRYPTION_KEYS",
            format!("{{k1=\"{k1}\", k2=\"{k2}\"}}"),
        );
    let rotated = output(command).await;
    assert!(rotated.status.success(), "{}", text(&rotated));
    env.restart().await;
    assert_eq!(
        key_of(ids[0]).await,
        (Some("k2".to_owned()), "json+zstd".to_owned())
    );
    let (_, read) = env.get(&format!("/v1/jobs/{}", ids[0])).await;
    assert_eq!(read["payload"], payload(0), "{read}");
    env.finish().await;
}

/// An instance built before compression (V50) cannot read a compressed
/// payload: it would set the job aside. While one is live, compression is
/// held — new payloads written as given, `tickler_compression_held` 1 — by
/// the instances already serving, by one that starts meanwhile (held from
/// its start: a rolling upgrade never stalls) and by an import; once it is
/// gone, compression goes on by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_is_held_while_an_instance_built_before_it_is_live() {
    let env = compressing().await;
    let first = batch(&env, 0, 1, 3_600_000).await[0];
    assert_eq!(stored(&env, first).await.1, Some(0), "compressed");

    // The version before compression starts beside it, and beats.
    sqlx::query(
        "INSERT INTO instances (id, host, pid, version, roles, started_at, heartbeat_at) \
         VALUES (900001, 'old-host', 4242, '0.1.0+schema.49', 'api', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))",
    )
    .execute(&env.sql)
    .await
    .unwrap();
    let beating = tokio_util::sync::CancellationToken::new();
    let beats = {
        let (sql, beating) = (env.sql.clone(), beating.clone());
        tokio::spawn(async move {
            while !beating.is_cancelled() {
                sqlx::query(
                    "UPDATE instances SET heartbeat_at = UTC_TIMESTAMP(3) WHERE id = 900001",
                )
                .execute(&sql)
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };

    let held = eventually(Duration::from_secs(15), || async {
        let id = batch(&env, 1_000 + rand_suffix(), 1, 3_600_000).await[0];
        stored(&env, id).await.1.is_none().then_some(id)
    })
    .await
    .expect("new payloads written as given while the old instance lives");
    let (_, read) = env.get(&format!("/v1/jobs/{held}")).await;
    assert!(read["payload"].is_object(), "{read}");
    let (_, metrics) = env.metrics_text().await;
    assert!(metrics.contains("tickler_compression_held 1"), "{metrics}");

    let second = env.another().await;
    assert!(
        second.store.codec().is_held(),
        "an instance started beside the old one is held from its start"
    );
    let dir = tickler_testkit::scratch_dir();
    let file = dir.join("held.ndjson");
    std::fs::write(
        &file,
        json!({"topic": env.topic, "key": "imported", "payload": payload(1), "delay_ms": 3_600_000})
            .to_string(),
    )
    .unwrap();
    let import = tickler(&env, &["import", "--quiet", file.to_str().unwrap()]).await;
    assert!(import.status.success(), "{}", text(&import));
    assert!(
        text(&import).contains("compression held")
            && text(&import)
                .contains("instance 900001 (old-host pid 4242, version 0.1.0+schema.49)"),
        "{}",
        text(&import)
    );
    let imported: u64 = sqlx::query_scalar("SELECT id FROM jobs WHERE job_key = 'imported'")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(stored(&env, imported).await.1, None, "imported as given");

    // Gone: compression goes on again.
    beating.cancel();
    beats.await.unwrap();
    sqlx::query("DELETE FROM instances WHERE id = 900001")
        .execute(&env.sql)
        .await
        .unwrap();
    eventually(Duration::from_secs(15), || async {
        let id = batch(&env, 2_000 + rand_suffix(), 1, 3_600_000).await[0];
        stored(&env, id).await.1.is_some().then_some(())
    })
    .await
    .expect("compressed again once no older instance is live");
    let (_, metrics) = env.metrics_text().await;
    assert!(metrics.contains("tickler_compression_held 0"), "{metrics}");
    assert!(
        eventually(Duration::from_secs(15), || async {
            (!second.store.codec().is_held()).then_some(())
        })
        .await
        .is_some(),
        "the second instance goes on too"
    );
    second.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    env.finish().await;
}
