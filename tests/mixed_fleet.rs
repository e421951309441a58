//! Encryption at rest in a fleet that is not all alike (#57): instances
//! halfway through adding a key, a key file that is not the key its id
//! named, an instance that lacks the key a row is sealed under while
//! another holds it, and sealed rows whose payload or headers were
//! removed by hand. Each pair of settings or builds side by side keeps
//! every job: none set aside while a live instance can open it, none
//! produced that does not open.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};
use tickler::config::Config;
use tickler::domain::keys::Hold;
use tickler_testkit::{eventually, output, output_text, records_read_keys, TestEnv};
use tokio_util::sync::CancellationToken;

/// Two key files: k1 and k2 (base64 and raw bytes), and a third holding
/// other material for the id k1.
fn key_files() -> (String, String, String) {
    let dir = tickler_testkit::scratch_dir();
    let write = |name: &str, bytes: Vec<u8>| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        format!("file:{}", path.display())
    };
    (
        write("k1", tickler::domain::keys::generate().into_bytes()),
        write("k2", vec![7u8; 32]),
        write(
            "k1-impostor",
            tickler::domain::keys::generate().into_bytes(),
        ),
    )
}

fn keyed(config: &mut Config, active: &str, keys: &[(&str, &str)]) {
    config.encryption.active_key = Some(active.to_owned());
    config.encryption.keys.clear();
    for (id, source) in keys {
        config
            .encryption
            .keys
            .insert((*id).to_owned(), (*source).to_owned());
    }
}

/// (status, enc_key, last_error) of job `id`, as MySQL holds them.
async fn row(env: &TestEnv, id: u64) -> (String, Option<String>, Option<String>) {
    let (status, key, error): (String, Option<String>, Option<String>) = sqlx::query_as(
        "SELECT CAST(status AS CHAR), CAST(enc_key AS CHAR), CAST(last_error AS CHAR) \
         FROM jobs WHERE id = ?",
    )
    .bind(id)
    .fetch_one(&env.sql)
    .await
    .unwrap();
    (status, key, error)
}

async fn held_await(env: &TestEnv, want: Hold) {
    let keys = env.store.keys().clone();
    let reached = eventually(Duration::from_secs(20), || {
        let keys = keys.clone();
        let want = want.clone();
        async move { (keys.held() == want).then_some(()) }
    })
    .await;
    assert!(
        reached.is_some(),
        "hold {want:?} reached (now {:?})",
        env.store.keys().held()
    );
}

fn ids_of(batch: &Value) -> Vec<u64> {
    batch["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|result| result["id"].as_u64().expect("created"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_halfway_through_adding_a_key_seals_under_one_they_all_hold() {
    let (k1, k2, _) = key_files();
    let (a1, a2) = (k1.clone(), k2.clone());
    // A: the key added and made active; B: not restarted yet.
    let env = TestEnv::start_with(move |c| keyed(c, "k2", &[("k1", &a1), ("k2", &a2)])).await;
    let mut old = env.config.clone();
    keyed(&mut old, "k1", &[("k1", &k1)]);
    let b = tickler::app::start(old, CancellationToken::new())
        .await
        .expect("the instance without k2 starts");
    held_await(&env, Hold::To("k1".to_owned())).await;

    // Phase two before phase one is done: refused, naming B.
    let mut rotate = env.command(env!("CARGO_BIN_EXE_tickler"));
    rotate
        .args(["keys", "rotate"])
        .env("TICKLER_ENCRYPTION_ACTIVE_KEY", "k2")
        .env(
            "TICKLER_ENCRYPTION_KEYS",
            format!("{{k1=\"{k1}\", k2=\"{k2}\"}}"),
        );
    let refused = output(rotate).await;
    let said = output_text(&refused);
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("lack key k2"), "{said}");

    // 200 jobs through A, due in 3 s: every one arrives, none dead.
    let consumer = env.consumer();
    let jobs: Vec<Value> = (0..200)
        .map(|n| {
            json!({"topic": env.topic, "key": format!("j{n}"), "payload": {"n": n},
            "headers": {"tenant": "t"}, "delay_ms": 3_000})
        })
        .collect();
    let (status, batch) = env.post("/v1/jobs/batch", json!({"jobs": jobs})).await;
    assert_eq!(status, 200, "{batch}");
    let ids = ids_of(&batch);
    for id in &ids {
        assert_eq!(row(&env, *id).await.1.as_deref(), Some("k1"), "job {id}");
    }
    let records = records_read_keys(&consumer, 200, Duration::from_secs(60)).await;
    let arrived: HashSet<String> = records
        .iter()
        .filter_map(|record| record.header("tickler-job-id").map(str::to_owned))
        .collect();
    assert_eq!(arrived.len(), 200, "every job arrives");
    let dead: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'dead'")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(dead, 0);

    // B restarted with the key (gone here): A seals under k2 again.
    b.shutdown().await;
    sqlx::query("DELETE FROM instances WHERE enc_keys = 'k1'")
        .execute(&env.sql)
        .await
        .unwrap();
    held_await(&env, Hold::No).await;
    let later = env
        .job_create(json!({"key": "later", "payload": 1, "delay_ms": 60_000}))
        .await;
    let later = later["id"].as_u64().unwrap();
    assert_eq!(row(&env, later).await.1.as_deref(), Some("k2"));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_file_with_other_material_under_a_known_id_is_refused_at_start() {
    let (k1, _, impostor) = key_files();
    let env = TestEnv::start_with(move |c| keyed(c, "k1", &[("k1", &k1)])).await;
    let mut wrong = env.config.clone();
    keyed(&mut wrong, "k1", &[("k1", &impostor)]);
    let err = match tickler::app::start(wrong, CancellationToken::new()).await {
        Ok(_) => panic!("an instance with other material under k1 starts"),
        Err(err) => err.to_string(),
    };
    assert!(
        err.contains("k1") && err.contains("enc_key_canaries"),
        "{err}"
    );

    // As after an upgrade from a build without canaries: rows sealed
    // under k1, no canary yet. The wrong material, first to start, is
    // refused by the rows (not trusted to set the canary); the right one
    // starts and sets it.
    env.job_create(json!({"key": "sealed", "payload": {"n": 1}, "delay_ms": 600_000}))
        .await;
    sqlx::query("DELETE FROM enc_key_canaries")
        .execute(&env.sql)
        .await
        .unwrap();
    let mut wrong = env.config.clone();
    keyed(&mut wrong, "k1", &[("k1", &impostor)]);
    let err = match tickler::app::start(wrong, CancellationToken::new()).await {
        Ok(_) => panic!("the first instance since canaries, with other material, starts"),
        Err(err) => err.to_string(),
    };
    assert!(err.contains("k1"), "{err}");
    let canaries: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM enc_key_canaries")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(canaries, 0, "no canary set by the wrong key");
    let right = tickler::app::start(env.config.clone(), CancellationToken::new())
        .await
        .expect("the right key starts");
    right.shutdown().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_row_blanked_or_stripped_of_headers_is_set_aside_unsent() {
    let (k1, _, _) = key_files();
    let env = TestEnv::start_with(move |c| keyed(c, "k1", &[("k1", &k1)])).await;
    let consumer = env.consumer();
    let mut ids = Vec::new();
    for key in ["blanked", "stripped", "emptied"] {
        let job = env
            .job_create(json!({"key": key, "payload": {"card": "4242"},
                "headers": {"tenant": "a"}, "delay_ms": 3_600_000}))
            .await;
        ids.push(job["id"].as_u64().unwrap());
    }
    for (id, edit) in ids
        .iter()
        .zip(["payload = ''", "headers = NULL", "headers = ''"])
    {
        sqlx::query(&format!(
            "UPDATE jobs SET {edit}, schedule_time = UTC_TIMESTAMP(3) WHERE id = ?"
        ))
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    }
    for id in &ids {
        let (status, body) = env.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (500, Some("unreadable_row")),
            "{body}"
        );
    }
    for id in &ids {
        env.status_await(*id, "dead", Duration::from_secs(30)).await;
        let (_, _, error) = row(&env, *id).await;
        let error = error.unwrap_or_default();
        assert!(
            error.starts_with("unreadable row: ") && error.contains("does not open"),
            "{error}"
        );
    }
    // A job after them arrives; none of theirs did.
    let after = env
        .job_create(json!({"key": "after", "payload": 1, "delay_ms": 0}))
        .await;
    let records = records_read_keys(&consumer, 1, Duration::from_secs(30)).await;
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].header("tickler-job-id"),
        Some(after["id"].as_u64().unwrap().to_string().as_str())
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_under_a_key_another_live_instance_holds_waits_for_it() {
    let (k1, k2, _) = key_files();
    let (a1, a2) = (k1.clone(), k2.clone());
    let mut env = TestEnv::start_with(move |c| keyed(c, "k2", &[("k1", &a1), ("k2", &a2)])).await;
    let consumer = env.consumer();
    // Sealed under k2 before B, which lacks it, joins and takes half of
    // the shards.
    let jobs: Vec<Value> = (0..20)
        .map(|n| json!({"topic": env.topic, "payload": {"n": n}, "delay_ms": 10_000}))
        .collect();
    let (status, batch) = env.post("/v1/jobs/batch", json!({"jobs": jobs})).await;
    assert_eq!(status, 200, "{batch}");
    let ids = ids_of(&batch);
    let orphan = env
        .job_create(json!({"key": "orphan", "payload": 1, "delay_ms": 3_600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    let mut old = env.config.clone();
    keyed(&mut old, "k1", &[("k1", &k1)]);
    let b = tickler::app::start(old.clone(), CancellationToken::new())
        .await
        .expect("the instance without k2 starts");

    // B claims those of its shards and leaves them to A: released, never
    // set aside.
    let released = eventually(Duration::from_secs(40), || async {
        let released: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE last_error LIKE '%released unsent%'",
        )
        .fetch_one(&env.sql)
        .await
        .unwrap();
        (released > 0).then_some(())
    })
    .await;
    assert!(released.is_some(), "B left some to A");
    let dead: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'dead'")
        .fetch_one(&env.sql)
        .await
        .unwrap();
    assert_eq!(dead, 0, "none set aside while A holds k2");
    // B restarted with the key (gone here): A sends every one.
    b.shutdown().await;
    let records = records_read_keys(&consumer, 20, Duration::from_secs(60)).await;
    let arrived: HashSet<u64> = records
        .iter()
        .filter_map(|record| record.header("tickler-job-id")?.parse().ok())
        .collect();
    let statuses: Vec<(u64, String, Option<String>)> = sqlx::query_as(
        "SELECT id, CAST(status AS CHAR), CAST(last_error AS CHAR) FROM jobs ORDER BY id",
    )
    .fetch_all(&env.sql)
    .await
    .unwrap();
    assert_eq!(
        arrived,
        ids.iter().copied().collect::<HashSet<u64>>(),
        "{statuses:?}"
    );

    // Only B left, and nobody holds k2: that row is set aside, named.
    env.stop().await;
    let b = tickler::app::start(old, CancellationToken::new())
        .await
        .expect("the instance without k2 starts alone");
    sqlx::query("UPDATE jobs SET schedule_time = UTC_TIMESTAMP(3) WHERE id = ?")
        .bind(orphan)
        .execute(&env.sql)
        .await
        .unwrap();
    let set_aside = eventually(Duration::from_secs(60), || async {
        (row(&env, orphan).await.0 == "dead").then_some(())
    })
    .await;
    assert!(set_aside.is_some(), "{:?}", row(&env, orphan).await);
    let (_, _, error) = row(&env, orphan).await;
    assert!(
        error
            .unwrap_or_default()
            .contains("which this instance does not have"),
        "named"
    );
    b.shutdown().await;
    env.finish().await;
}

/// Registers a live instance row as an older build would (`version`
/// `…+schema.N`, no `enc_keys`); returns its id.
async fn older_instance(env: &TestEnv, schema: i32) -> u64 {
    sqlx::query(
        "INSERT INTO instances (host, pid, version, roles, ttl_ms, started_at, heartbeat_at) \
         VALUES ('older', 1, ?, 'api,dispatcher', 120000, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))",
    )
    .bind(format!("0.9.0+schema.{schema}"))
    .execute(&env.sql)
    .await
    .unwrap()
    .last_insert_id()
}

/// Whether a job created now has a payload an older build (which binds
/// nothing but the row and column) opens; the job is deleted after.
async fn opens_as_an_older_build(env: &TestEnv) -> bool {
    let id = env
        .job_create(json!({"key": "probe", "payload": {"k": 1},
            "headers": {"tenant": "a"}, "delay_ms": 600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    let payload: Vec<u8> = sqlx::query_scalar("SELECT payload FROM jobs WHERE id = ?")
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap();
    sqlx::query("DELETE FROM jobs WHERE id = ?")
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    env.store
        .keys()
        .open("k1", id, tickler::domain::keys::Part::Payload, &payload)
        .is_ok()
}

async fn instance_gone(env: &TestEnv, id: u64) {
    sqlx::query("DELETE FROM instances WHERE id = ?")
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_builds_beside_hold_sealing_and_headers_binding_until_they_are_gone() {
    let (k1, _, _) = key_files();
    let env = TestEnv::start_with(move |c| keyed(c, "k1", &[("k1", &k1)])).await;

    // Built before encryption at rest (V49): it would send ciphertext.
    let oldest = older_instance(&env, 40).await;
    held_await(&env, Hold::Plain).await;
    let plain = env
        .job_create(json!({"key": "plain", "payload": 1, "delay_ms": 600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    assert_eq!(row(&env, plain).await.1, None, "written plain");
    instance_gone(&env, oldest).await;
    held_await(&env, Hold::No).await;

    // Built after sealing, before V55: it opens a payload sealed the old
    // way only, so the headers are not bound while it is live.
    let older = older_instance(&env, 53).await;
    let unbound = eventually(Duration::from_secs(20), || async {
        opens_as_an_older_build(&env).await.then_some(())
    })
    .await;
    assert!(unbound.is_some(), "an older build can open what is sealed");
    instance_gone(&env, older).await;
    let bound = eventually(Duration::from_secs(20), || async {
        (!opens_as_an_older_build(&env).await).then_some(())
    })
    .await;
    assert!(
        bound.is_some(),
        "headers bound once every instance reads it"
    );
    env.finish().await;
}
