//! Wall-clock jobs follow tzdata (#60). A job given `run_local` and a
//! `time_zone` keeps them beside the instant computed with the loaded
//! tzdata release. When a newer release is loaded (here: a zoneinfo
//! directory `zic` wrote, swapped under a running instance), the pending
//! jobs and schedule occurrences whose instant changes move, with a history
//! row naming the release; every other job stays where it was.
//!
//! One test in this file: the loaded tzdata is the process's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use tickler_testkit::{eventually, scratch_dir, TestEnv};

/// A zoneinfo directory of release `version` under `root`: `Test/Steady`
/// at +02 always; `Test/Shifting` at +01, or (`shifted`) +01 until 2030
/// then +02 — a country moving its clock for good; `Test/Falling` likewise
/// from +03 to +02 (its instants move later).
fn zoneinfo(root: &Path, version: &str, shifted: bool) -> PathBuf {
    let dir = root.join(version);
    std::fs::create_dir_all(&dir).unwrap();
    let shifting = if shifted {
        "Zone\tTest/Shifting\t1:00\t-\t+01\t2030 Jan 1 0:00\n\t\t\t2:00\t-\t+02\n\
         Zone\tTest/Falling\t3:00\t-\t+03\t2030 Jan 1 0:00\n\t\t\t2:00\t-\t+02\n"
    } else {
        "Zone\tTest/Shifting\t1:00\t-\t+01\nZone\tTest/Falling\t3:00\t-\t+03\n"
    };
    let source = format!(
        "Zone\tEtc/UTC\t0\t-\tUTC\nLink\tEtc/UTC\tUTC\nZone\tTest/Steady\t2:00\t-\t+02\n{shifting}"
    );
    let source_path = root.join(format!("{version}.zi"));
    std::fs::write(&source_path, source).unwrap();
    let status = Command::new("zic")
        .arg("-d")
        .arg(&dir)
        .arg(&source_path)
        .status()
        .expect("zic (libc-bin) is installed");
    assert!(status.success());
    std::fs::write(dir.join("tzdata.zi"), format!("# version {version}\n")).unwrap();
    dir
}

/// Points `link` at `target`, atomically (a rename), as a package update
/// replaces a directory.
fn point(link: &Path, target: &Path) {
    let next = link.with_extension("next");
    let _ = std::fs::remove_file(&next);
    std::os::unix::fs::symlink(target, &next).unwrap();
    std::fs::rename(&next, link).unwrap();
}

async fn job(env: &TestEnv, id: u64) -> Value {
    let (status, job) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(status, 200, "{job}");
    job
}

async fn create(env: &TestEnv, body: Value) -> u64 {
    let (status, created) = env.post("/v1/jobs", body).await;
    assert_eq!(status, 201, "{created}");
    created["id"].as_u64().unwrap()
}

async fn actors(env: &TestEnv, id: u64) -> Vec<String> {
    sqlx::query_scalar("SELECT CAST(actor AS CHAR) FROM job_events WHERE job_id = ?")
        .bind(id)
        .fetch_all(&env.sql)
        .await
        .unwrap()
}

/// Long because it is one story: jobs created under one release, the
/// release replaced under the running instance, and each job looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_tzdata_moves_the_wall_clock_jobs_it_changes_and_no_other() {
    let root = scratch_dir();
    let old = zoneinfo(&root, "2099a", false);
    let new = zoneinfo(&root, "2099b", true);
    let current = root.join("current");
    point(&current, &old);
    let path = current.display().to_string();
    let env = TestEnv::start_with(move |c| {
        c.tzdata.path = path;
        c.tzdata.check_ms = 200;
    })
    .await;
    let topic = env.topic.clone();
    let (_, stats) = env.get("/v1/stats").await;
    assert_eq!(stats["tzdata"]["version"], "2099a", "{stats}");

    // Refused, with nothing written.
    for (body, code) in [
        (
            json!({"run_local": "2031-06-01T09:00:00"}),
            "invalid_schedule",
        ),
        (
            json!({"run_local": "2031-06-01T09:00:00", "time_zone": "Mars/Base"}),
            "invalid_time_zone",
        ),
        (
            json!({"run_local": "2031-06-01T09:00:00Z", "time_zone": "Test/Steady"}),
            "invalid_run_local",
        ),
        (
            json!({"run_local": "2031-06-01T09:00", "time_zone": "Test/Steady", "delay_ms": 5}),
            "invalid_schedule",
        ),
    ] {
        let mut body = body;
        body["topic"] = json!(topic);
        let (status, refused) = env.post("/v1/jobs", body).await;
        assert_eq!(
            (status, refused["error"]["code"].as_str()),
            (400, Some(code)),
            "{refused}"
        );
    }
    assert_eq!(env.jobs_count().await, 0);

    let local = |zone: &str, at: &str| json!({"topic": topic, "run_local": at, "time_zone": zone});
    let shifting = create(&env, local("Test/Shifting", "2031-06-01T09:00:00")).await;
    let steady = create(&env, local("Test/Steady", "2031-06-01T09:00:00")).await;
    let before_change = create(&env, local("Test/Shifting", "2029-06-01T09:00:00")).await;
    let mut windowed = local("Test/Shifting", "2031-06-01T12:00");
    windowed["window_ms"] = json!(600_000);
    windowed["key"] = json!("windowed");
    let windowed = create(&env, windowed).await;
    let instant = create(
        &env,
        json!({"topic": topic, "run_at": "2031-06-01T08:00:00Z"}),
    )
    .await;
    let unknown_zone = create(&env, local("Test/Shifting", "2031-06-02T09:00:00")).await;
    let newer_release = create(&env, local("Test/Shifting", "2031-06-03T09:00:00")).await;
    // 06:00Z, not after 06:30Z; the newer release puts it at 07:00Z.
    let mut bounded = local("Test/Falling", "2031-06-01T09:00:00");
    bounded["expires_at"] = json!("2031-06-01T06:30:00Z");
    bounded["key"] = json!("bounded");
    let bounded = create(&env, bounded).await;
    // Its expiry garbled by hand into a zero date: it reads as no expiry,
    // and the row moves with its siblings; the page goes on.
    let garbled = create(&env, local("Test/Shifting", "2031-06-04T09:00:00")).await;
    {
        let mut conn = env.sql.acquire().await.unwrap();
        sqlx::query("SET SESSION sql_mode = ''")
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query("UPDATE jobs SET expires_at = '0000-00-00 00:00:00' WHERE id = ?")
            .bind(garbled)
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    assert_eq!(
        job(&env, bounded).await["run_at"],
        "2031-06-01T06:00:00.000Z"
    );
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": topic, "key": "yearly", "cron": "0 9 1 6 *",
                   "time_zone": "Test/Shifting", "start_at": "2031-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");

    let shown = job(&env, shifting).await;
    assert_eq!(shown["run_at"], "2031-06-01T08:00:00.000Z", "{shown}");
    assert_eq!(shown["run_local"], "2031-06-01T09:00:00.000");
    assert_eq!(shown["time_zone"], "Test/Shifting");
    assert_eq!(shown["tzdata_version"], "2099a");
    assert_eq!(
        job(&env, steady).await["run_at"],
        "2031-06-01T07:00:00.000Z"
    );
    assert!(job(&env, instant).await.get("time_zone").is_none());
    let windowed_before = job(&env, windowed).await;
    assert_eq!(windowed_before["run_at"], "2031-06-01T11:00:00.000Z");
    let occurrence: u64 = eventually(Duration::from_secs(20), || async {
        sqlx::query_scalar::<_, u64>("SELECT id FROM jobs WHERE schedule_id IS NOT NULL")
            .fetch_optional(&env.sql)
            .await
            .unwrap()
    })
    .await
    .expect("the schedule's next occurrence is created");
    assert_eq!(
        job(&env, occurrence).await["run_at"],
        "2031-06-01T08:00:00.000Z"
    );
    assert_eq!(
        job(&env, occurrence).await["run_local"],
        "2031-06-01T09:00:00.000"
    );

    // Hand edits: a zone no release has (costs that row only), and a row
    // an instance with a newer release wrote (never moved back).
    sqlx::query("UPDATE jobs SET time_zone = 'Gone/Zone' WHERE id = ?")
        .bind(unknown_zone)
        .execute(&env.sql)
        .await
        .unwrap();
    sqlx::query("UPDATE jobs SET tzdata_version = '2100a' WHERE id = ?")
        .bind(newer_release)
        .execute(&env.sql)
        .await
        .unwrap();
    let untouched = |id| {
        let sql = env.sql.clone();
        async move {
            sqlx::query_as::<_, (String, u32)>(
                "SELECT DATE_FORMAT(schedule_time, '%Y-%m-%dT%H:%i:%s.%f'), version FROM jobs WHERE id = ?",
            )
            .bind(id)
            .fetch_one(&sql)
            .await
            .unwrap()
        }
    };
    let (unknown_before, newer_before) = (
        untouched(unknown_zone).await,
        untouched(newer_release).await,
    );

    // The release is replaced under the running instance.
    point(&current, &new);
    let moved = eventually(Duration::from_secs(30), || async {
        let shown = job(&env, shifting).await;
        (shown["tzdata_version"] == "2099b").then_some(shown)
    })
    .await
    .expect("the newer release is loaded and the job computed again");
    assert_eq!(moved["run_at"], "2031-06-01T07:00:00.000Z", "{moved}");
    assert_eq!(moved["run_local"], "2031-06-01T09:00:00.000");
    assert_eq!(moved["version"], 2);
    assert!(actors(&env, shifting)
        .await
        .contains(&"tzdata:2099b".to_owned()));
    let (_, stats) = env.get("/v1/stats").await;
    assert_eq!(stats["tzdata"]["version"], "2099b", "{stats}");

    // The window moved with it, the decided instant by as much.
    let windowed_after = eventually(Duration::from_secs(10), || async {
        let shown = job(&env, windowed).await;
        (shown["tzdata_version"] == "2099b").then_some(shown)
    })
    .await
    .unwrap();
    assert_eq!(windowed_after["run_at"], "2031-06-01T10:00:00.000Z");
    let produce = |view: &Value| {
        view["produce_at"]
            .as_str()
            .unwrap()
            .parse::<chrono::DateTime<chrono::Utc>>()
            .unwrap()
    };
    assert_eq!(
        produce(&windowed_before) - produce(&windowed_after),
        chrono::Duration::hours(1)
    );
    // The schedule's occurrence too.
    let occurrence_after = eventually(Duration::from_secs(10), || async {
        let shown = job(&env, occurrence).await;
        (shown["tzdata_version"] == "2099b").then_some(shown)
    })
    .await
    .unwrap();
    assert_eq!(occurrence_after["run_at"], "2031-06-01T07:00:00.000Z");

    // A job moved past its own not-after: moved (its local time is the
    // truth), its expires_at never put later: it will end expired unsent.
    let bounded_after = eventually(Duration::from_secs(10), || async {
        let shown = job(&env, bounded).await;
        (shown["tzdata_version"] == "2099b").then_some(shown)
    })
    .await
    .unwrap();
    assert_eq!(bounded_after["run_at"], "2031-06-01T07:00:00.000Z");
    assert_eq!(bounded_after["expires_at"], "2031-06-01T06:30:00.000Z");
    let (_, text) = env.metrics_text().await;
    assert!(
        text.lines()
            .any(|l| l == "tickler_tzdata_jobs_total{outcome=\"moved_past_expiry\"} 1"),
        "{text}"
    );

    // No other: the zone that did not change, the date before the change
    // (stamped, not moved, no history row), the job given an instant.
    for (id, run_at) in [
        (steady, "2031-06-01T07:00:00.000Z"),
        (before_change, "2029-06-01T08:00:00.000Z"),
    ] {
        let shown = eventually(Duration::from_secs(10), || async {
            let shown = job(&env, id).await;
            (shown["tzdata_version"] == "2099b").then_some(shown)
        })
        .await
        .unwrap();
        assert_eq!(
            (shown["run_at"].as_str(), shown["version"].as_u64()),
            (Some(run_at), Some(1))
        );
        assert!(!actors(&env, id)
            .await
            .iter()
            .any(|a| a.starts_with("tzdata:")));
    }
    let plain = job(&env, instant).await;
    assert_eq!(
        (plain["run_at"].as_str(), plain["version"].as_u64()),
        (Some("2031-06-01T08:00:00.000Z"), Some(1))
    );
    assert_eq!(untouched(unknown_zone).await, unknown_before);
    assert_eq!(untouched(newer_release).await, newer_before);
    assert_eq!(
        untouched(garbled).await,
        ("2031-06-04T07:00:00.000000".to_owned(), 2)
    );

    // A new run_at ends a job's wall clock.
    let (status, patched) = env
        .request(
            "PATCH",
            &format!("/v1/jobs/{steady}"),
            Some(json!({"version": 1, "run_at": "2031-07-01T00:00:00Z"}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert!(patched.get("time_zone").is_none(), "{patched}");
    env.finish().await;
}
