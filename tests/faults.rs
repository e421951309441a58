//! The fault suite: a few thousand jobs due across a real fault, then the
//! Chronos-style checker. Every fault must end with nothing lost, nothing
//! early, nothing cancelled produced, and no duplicate a fault does not
//! explain. Faults that would disturb other tests (FLUSHALL, restarts,
//! outages) hit private instances of the service.
//!
//! `TICKLER_FAULT_SCALE=10` multiplies the number of jobs for a longer run.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use tickler_testkit::chronos::{check, check_moved, check_with, Expected, Seen, Services, World};
use tickler_testkit::procs::{PrivateMariadb, PrivateRedis, PrivateTansu};

fn jobs(base: usize) -> usize {
    let scale: usize = std::env::var("TICKLER_FAULT_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    base * scale.max(1)
}

/// Sleeps until `at` (test clock).
async fn until(at: chrono::DateTime<Utc>) {
    if let Ok(wait) = (at - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

fn secs(s: f64) -> chrono::Duration {
    chrono::Duration::milliseconds((s * 1000.0) as i64)
}

fn ids(expected: &[Expected], except: &HashSet<u64>) -> HashSet<u64> {
    expected
        .iter()
        .map(|e| e.id)
        .filter(|id| !except.contains(id))
        .collect()
}

/// Waits for every job, then checks and asserts.
async fn verdict(
    world: &World,
    name: &str,
    expected: &[Expected],
    cancelled: &HashSet<u64>,
    wait: Duration,
) {
    world.await_seen(&ids(expected, cancelled), wait).await;
    let interrupted = world.interrupted().await;
    let verdict = check(
        expected,
        cancelled,
        &interrupted,
        &world.seen_audited().await,
    );
    world.explain(&verdict).await;
    verdict.assert_clean(name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_tickler_mid_batch_repeatedly_loses_nothing() {
    let mut world = World::start(Services::shared(), &[]).await;
    let t0 = Utc::now() + secs(3.0);
    let expected = world
        .jobs_schedule(jobs(2000), t0, Duration::from_secs(10))
        .await;
    for at in [1.5, 4.0, 7.0] {
        until(t0 + secs(at)).await;
        world.tickler.kill9();
        tokio::time::sleep(Duration::from_millis(300)).await;
        world.restart_tickler().await;
    }
    verdict(
        &world,
        "kill -9",
        &expected,
        &HashSet::new(),
        Duration::from_secs(60),
    )
    .await;
    world.finish().await;
}

/// A topic the broker does not have, with a job on it due every second
/// beside a steady stream on a healthy topic (as after someone deleted a
/// topic that still has jobs). The healthy jobs keep their lateness (the
/// verdict prints it; `kafka.message_timeout_ms` is 2 s here, which a
/// dispatcher waiting on the bad record would add to every pass), and the
/// bad jobs fail their attempts and end dead instead of cycling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_delays_no_other_topic_and_its_jobs_end_dead() {
    let world = World::start(Services::shared(), &[("TICKLER_KAFKA_TOPIC_CHECK", "off")]).await;
    let missing = tickler_testkit::unique("tickler-missing-");
    let t0 = Utc::now() + secs(3.0);
    let mut bad = Vec::new();
    for second in 0..15 {
        let body = serde_json::json!({
            "topic": missing, "payload": second, "max_attempts": 2,
            "backoff_base_ms": 500, "backoff_cap_ms": 1000,
            "run_at": (t0 + secs(second as f64)).to_rfc3339(),
        });
        let (status, job) = world.post_job(&body).await;
        assert_eq!(status, 201, "{job}");
        bad.push(job["id"].as_u64().unwrap());
    }
    let expected = world
        .jobs_schedule(jobs(1500), t0, Duration::from_secs(15))
        .await;
    verdict(
        &world,
        "a job on a missing topic every second",
        &expected,
        &HashSet::new(),
        Duration::from_secs(60),
    )
    .await;
    let dead = tickler_testkit::eventually(Duration::from_secs(30), || async {
        let dead: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE topic = ? AND status = 'dead' AND attempt = 2",
        )
        .bind(&missing)
        .fetch_one(&world.sql)
        .await
        .unwrap();
        (dead == bad.len() as i64).then_some(())
    })
    .await;
    assert!(
        dead.is_some(),
        "every job on the missing topic ended dead at attempt 2"
    );
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_flushall_loses_nothing() {
    let redis = PrivateRedis::start().await;
    let services = Services {
        redis_url: redis.url(),
        ..Services::shared()
    };
    let world = World::start(services, &[]).await;
    let t0 = Utc::now() + secs(3.0);
    let expected = world
        .jobs_schedule(jobs(2000), t0, Duration::from_secs(8))
        .await;
    until(t0 + secs(3.0)).await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    verdict(
        &world,
        "redis FLUSHALL",
        &expected,
        &HashSet::new(),
        Duration::from_secs(60),
    )
    .await;
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_loses_nothing() {
    let mut redis = PrivateRedis::start().await;
    let services = Services {
        redis_url: redis.url(),
        ..Services::shared()
    };
    let world = World::start(services, &[]).await;
    let t0 = Utc::now() + secs(3.0);
    let expected = world
        .jobs_schedule(jobs(2000), t0, Duration::from_secs(8))
        .await;
    until(t0 + secs(3.0)).await;
    redis.restart().await;
    verdict(
        &world,
        "redis restart",
        &expected,
        &HashSet::new(),
        Duration::from_secs(60),
    )
    .await;
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_unreachable_for_30s_loses_nothing_and_the_api_keeps_accepting() {
    let redis = PrivateRedis::start().await;
    let services = Services {
        redis_url: redis.url(),
        ..Services::shared()
    };
    let world = World::start(services, &[]).await;
    let t0 = Utc::now() + secs(3.0);
    let mut expected = world
        .jobs_schedule(jobs(2000), t0, Duration::from_secs(40))
        .await;
    until(t0 + secs(2.0)).await;
    redis.proc.pause();
    // MySQL is the truth: jobs are accepted while Redis does not answer.
    let during = world
        .jobs_schedule(20, Utc::now() + secs(1.0), Duration::from_secs(2))
        .await;
    expected.extend(during);
    until(t0 + secs(32.0)).await;
    redis.proc.resume();
    verdict(
        &world,
        "redis unreachable 30 s",
        &expected,
        &HashSet::new(),
        Duration::from_secs(90),
    )
    .await;
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickler_started_while_redis_is_down_takes_jobs_and_produces_them_when_it_returns() {
    let mut redis = PrivateRedis::start().await;
    redis.proc.kill9();
    let services = Services {
        redis_url: redis.url(),
        ..Services::shared()
    };
    // tickler starts without Redis: MySQL takes the jobs.
    let world = World::start(services, &[]).await;
    let t0 = Utc::now() + secs(1.0);
    let expected = world
        .jobs_schedule(jobs(200), t0, Duration::from_secs(2))
        .await;
    until(t0 + secs(3.0)).await;
    redis.restart().await;
    verdict(
        &world,
        "tickler started without redis",
        &expected,
        &HashSet::new(),
        Duration::from_secs(30),
    )
    .await;
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_killed_and_restarted_loses_nothing_and_the_api_answers_503() {
    let mut mariadb = PrivateMariadb::start().await;
    let services = Services {
        mysql_server_url: mariadb.server_url(),
        ..Services::shared()
    };
    let world = World::start(services, &[]).await;
    let t0 = Utc::now() + secs(3.0);
    let expected = world
        .jobs_schedule(jobs(2000), t0, Duration::from_secs(10))
        .await;
    until(t0 + secs(3.0)).await;
    mariadb.proc.kill9();
    let body = serde_json::json!({"topic": world.topic, "payload": 1, "delay_ms": 10});
    let (status, reply) = world.post_job(&body).await;
    assert_eq!(status, 503, "mysql down: {reply}");
    assert_eq!(reply["error"]["code"], "unavailable");
    tokio::time::sleep(Duration::from_secs(2)).await;
    mariadb.restart().await;
    verdict(
        &world,
        "mariadb kill -9",
        &expected,
        &HashSet::new(),
        Duration::from_secs(90),
    )
    .await;
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_stopped_for_30s_loses_nothing() {
    let mut tansu = PrivateTansu::start().await;
    let services = Services {
        brokers: tansu.brokers(),
        ..Services::shared()
    };
    let world = World::start(services, &[]).await;
    let t0 = Utc::now() + secs(3.0);
    let expected = world
        .jobs_schedule(jobs(2000), t0, Duration::from_secs(40))
        .await;
    until(t0 + secs(2.0)).await;
    tansu.proc.stop();
    until(t0 + secs(32.0)).await;
    tansu.restart().await;
    // The broker's own bug must not pass for tickler's: if tansu's SQLite
    // storage panics, it is started again on the same storage, as an
    // operator would (tickler must lose nothing across that either).
    let tansu = std::sync::Arc::new(tokio::sync::Mutex::new(tansu));
    let watchdog = {
        let tansu = tansu.clone();
        tokio::spawn(async move {
            let mut seen = 0;
            loop {
                seen = tansu.lock().await.revive_if_crashed(seen).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    verdict(
        &world,
        "broker down 30 s",
        &expected,
        &HashSet::new(),
        Duration::from_secs(90),
    )
    .await;
    watchdog.abort();
    world.finish().await;
}

/// tickler's host (and Redis on it) 30 s ahead of the database, the clock
/// that decides. libfaketime runs the database 30 s behind rather than
/// tickler 30 s ahead: under LD_PRELOAD, librdkafka's timed waits mix a faked
/// gettimeofday with glibc's unfaked C11 cnd_timedwait and oversleep by the
/// offset — an artifact of partial interposition that a truly wrong clock
/// (consistent everywhere) would not have. The skew tickler sees is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickler_and_redis_30s_ahead_of_mysql_produce_nothing_early() {
    let mariadb = PrivateMariadb::start_faketime("-30s").await;
    let services = Services {
        mysql_server_url: mariadb.server_url(),
        ..Services::shared()
    };
    let world = World::start(services, &[]).await;
    let db_ms: i64 = sqlx::query_scalar("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)")
        .fetch_one(&world.sql)
        .await
        .unwrap();
    let behind_ms = Utc::now().timestamp_millis() - db_ms;
    assert!(
        behind_ms > 25_000,
        "the database runs 30 s behind, measured {behind_ms} ms"
    );

    // run_at is read on the database's clock: by the test's clock each job is
    // due `behind_ms` later.
    let t0 = Utc::now() + secs(3.0);
    let mut expected = world
        .jobs_schedule(jobs(1500), t0, Duration::from_secs(10))
        .await;
    // (Less 50 ms: the offset was measured across a round trip.)
    for job in &mut expected {
        job.due_ms += behind_ms - 50;
    }
    verdict(
        &world,
        "tickler 30 s ahead of mysql",
        &expected,
        &HashSet::new(),
        Duration::from_secs(90),
    )
    .await;
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_sql_edits_while_jobs_fire_are_honoured() {
    let world = World::start(Services::shared(), &[]).await;
    let t0 = Utc::now() + secs(5.0);
    // Spread over 30 s: on a machine loaded by the rest of the suite, the
    // first hundred may take seconds to go out, and the edits need many
    // jobs still ahead of them. Created in batches: one by one, on such a
    // machine, the last could be created after most were due.
    let started = std::time::Instant::now();
    let mut expected = world
        .jobs_schedule_batched(jobs(2000), t0, Duration::from_secs(30))
        .await;
    let created_in = started.elapsed();
    expected.sort_by_key(|e| e.due_ms);
    // Edit while jobs fire: once a hundred have gone out.
    let firing = tickler_testkit::eventually(Duration::from_secs(30), || async {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE status = 'dispatched'")
            .fetch_one(&world.sql)
            .await
            .unwrap();
        (n >= 100).then_some(())
    })
    .await;
    assert!(firing.is_some(), "jobs are firing");

    // Jobs still ahead (by the clock now): every fourth is cancelled, moved
    // later or moved earlier.
    let ahead_ms = (Utc::now() + secs(2.0)).timestamp_millis();
    let mut cancelled = HashSet::new();
    let (mut moved_later, mut moved_earlier) = (0, 0);
    // Spread over every job still ahead, not the nearest 400: on a loaded
    // machine the edits, one statement each, would otherwise fall behind
    // the jobs firing and find them produced.
    let ahead = expected.iter().filter(|e| e.due_ms > ahead_ms).count();
    let step = (ahead / 400).max(1);
    for (n, job) in expected
        .iter_mut()
        .filter(|e| e.due_ms > ahead_ms)
        .enumerate()
        .filter(|(i, _)| i % step == 0)
        .map(|(_, job)| job)
        .enumerate()
        .take(400)
    {
        let (sql, shift_ms) = match n % 4 {
            0 => (
                "UPDATE jobs SET status = 'cancelled' WHERE id = ? AND status = 'pending'",
                0,
            ),
            1 => (
                "UPDATE jobs SET schedule_time = schedule_time + INTERVAL 3 SECOND \
                 WHERE id = ? AND status = 'pending'",
                3_000,
            ),
            2 => (
                "UPDATE jobs SET schedule_time = schedule_time - INTERVAL 2 SECOND \
                 WHERE id = ? AND status = 'pending'",
                -2_000,
            ),
            _ => continue,
        };
        let done = sqlx::query(sql)
            .bind(job.id)
            .execute(&world.sql)
            .await
            .unwrap();
        if done.rows_affected() == 1 {
            match shift_ms {
                0 => {
                    cancelled.insert(job.id);
                }
                3_000 => moved_later += 1,
                _ => moved_earlier += 1,
            }
            job.due_ms += shift_ms;
        }
    }
    // Jobs already produced are requeued for another attempt.
    let produced: Vec<u64> =
        sqlx::query_scalar("SELECT id FROM jobs WHERE status = 'dispatched' ORDER BY id LIMIT 50")
            .fetch_all(&world.sql)
            .await
            .unwrap();
    let mut requeued = HashSet::new();
    for job in expected.iter().filter(|e| produced.contains(&e.id)) {
        let done = sqlx::query(
            "UPDATE jobs SET status = 'pending', attempt = attempt + 1, \
             schedule_time = UTC_TIMESTAMP(3) WHERE id = ? AND status = 'dispatched'",
        )
        .bind(job.id)
        .execute(&world.sql)
        .await
        .unwrap();
        if done.rows_affected() == 1 {
            requeued.insert(job.id);
        }
    }
    let counts = (cancelled.len(), moved_later, moved_earlier, requeued.len());
    assert!(
        counts.0 > 20 && counts.1 > 20 && counts.2 > 20 && counts.3 > 10,
        "enough edits took effect (cancelled, later, earlier, requeued): {counts:?}; \
         {ahead} jobs were ahead when the edits began, {:?} after the creates began, \
         which took {created_in:?}",
        started.elapsed()
    );

    verdict(
        &world,
        "hand edits",
        &expected,
        &cancelled,
        Duration::from_secs(60),
    )
    .await;
    let second_attempts = |seen: &[Seen]| -> HashSet<u64> {
        seen.iter()
            .filter(|s| s.attempt == 2)
            .map(|s| s.id)
            .collect()
    };
    let arrived = tickler_testkit::eventually(Duration::from_secs(20), || async {
        let got = second_attempts(&world.seen());
        requeued.is_subset(&got).then_some(())
    })
    .await;
    assert!(
        arrived.is_some(),
        "every requeued job is produced again, as attempt 2"
    );
    world.finish().await;
}

#[test]
fn the_checker_flags_every_broken_promise() {
    let expected = [
        Expected {
            id: 1,
            due_ms: 1_000,
        },
        Expected {
            id: 2,
            due_ms: 1_000,
        },
        Expected {
            id: 3,
            due_ms: 1_000,
        },
        Expected {
            id: 4,
            due_ms: 1_000,
        },
        Expected {
            id: 5,
            due_ms: 1_000,
        },
    ];
    let seen = |id, attempt, received_at_ms| Seen {
        id,
        attempt,
        received_at_ms,
        partition: 0,
        offset: received_at_ms,
        dispatched_at_ms: received_at_ms,
        scheduled_at_ms: 1_000,
    };
    let records = [
        seen(1, 1, 1_010),
        seen(2, 1, 990),   // early
        seen(3, 1, 1_020), // cancelled, yet produced
        seen(4, 1, 1_005),
        seen(4, 1, 1_500), // duplicate, unexplained
                           // 5 is lost
    ];
    let cancelled: HashSet<u64> = [3].into();
    let verdict = check(&expected, &cancelled, &HashSet::new(), &records);
    assert_eq!(verdict.lost, vec![5]);
    assert_eq!(verdict.early, vec![2]);
    assert_eq!(verdict.cancelled_produced, vec![3]);
    assert_eq!(verdict.unexplained_duplicates, vec![(4, 1)]);
    assert_eq!(verdict.lateness_max_ms, 10);

    let interrupted: HashSet<u64> = [4].into();
    let verdict = check(&expected, &cancelled, &interrupted, &records);
    assert_eq!(verdict.explained_duplicates, vec![(4, 1)]);
    assert!(verdict.unexplained_duplicates.is_empty());

    // Jobs 1 and 4 moved by a PATCH answered 200: 1 to 1_000 (where its
    // record is), 4 to 1_200 — yet a record of 4 carries the old time.
    let moved: HashMap<u64, i64> = [(1, 1_000), (4, 1_200)].into();
    let verdict = check_moved(
        &expected,
        &cancelled,
        &HashSet::new(),
        &moved,
        &interrupted,
        &records,
    );
    assert_eq!(verdict.patched_old_time, vec![4]);
    assert_eq!(verdict.lost, vec![5]);
}

/// Settings for worlds of several instances: a short instance TTL, and a
/// claim lease far longer, so that what rescues a dead instance's jobs is
/// its death being noticed, not the lease.
const INSTANCE_TTL_MS: i64 = 2_000;
/// How long the claims of an instance found dead stay in doubt under
/// `instance_env` and the fault settings: `kafka.message_timeout_ms` 2000 +
/// `kafka.doubt_margin_ms` 2000.
const REVIVE_QUIET_MS: u64 = 4_000;

fn instance_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("TICKLER_CLUSTER_INSTANCE_TTL_MS", "2000"),
        ("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "30000"),
        ("TICKLER_CLUSTER_SHARDS", "8"),
    ]
}

/// Waits until the deployment's shards are spread over `n` live
/// dispatchers, each with its share.
async fn shards_spread(world: &World, n: usize) {
    let spread = tickler_testkit::eventually(Duration::from_secs(30), || async {
        let owners: Vec<(Option<u64>, i64)> = sqlx::query_as(
            "SELECT owner, COUNT(*) FROM shard_leases GROUP BY owner ORDER BY owner",
        )
        .fetch_all(&world.sql)
        .await
        .ok()?;
        let counts: Vec<i64> = owners
            .iter()
            .filter(|(o, _)| o.is_some())
            .map(|(_, c)| *c)
            .collect();
        (owners.iter().all(|(o, _)| o.is_some())
            && counts.len() == n
            && counts.iter().max()? - counts.iter().min()? <= 1)
            .then_some(counts)
    })
    .await;
    assert!(spread.is_some(), "the shards spread over {n} instances");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_one_of_three_instances_hands_its_jobs_over_within_the_ttl() {
    let mut world = World::start_many(Services::shared(), 3, &instance_env()).await;
    shards_spread(&world, 3).await;
    let t0 = Utc::now() + secs(3.0);
    let expected = world
        .jobs_schedule(jobs(3000), t0, Duration::from_secs(10))
        .await;
    until(t0 + secs(4.0)).await;
    // Under load: the victim holds claims in every state.
    world.instance_mut(2).kill9();
    verdict(
        &world,
        "kill -9 of one of three instances",
        &expected,
        &HashSet::new(),
        Duration::from_secs(60),
    )
    .await;
    // The goal, instance_ttl_ms + 2 s, is a figure (printed here, measured
    // by `tickler bench`); what the test holds to is the mechanism: every
    // claim the dead instance held was rescued because it was found dead,
    // none by the 30 s claim lease.
    let verdict = check(
        &expected,
        &HashSet::new(),
        &world.interrupted().await,
        &world.seen_audited().await,
    );
    eprintln!(
        "kill -9 of one of three: max lateness {} ms (goal instance_ttl_ms {INSTANCE_TTL_MS} + 2000 ms; p50 {} ms on this machine now)",
        verdict.lateness_max_ms, verdict.lateness_p50_ms
    );
    let by_lease: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE last_error LIKE 'claim expired%'")
            .fetch_one(&world.sql)
            .await
            .unwrap();
    assert_eq!(
        by_lease,
        0,
        "no claim waited for the lease; rescued on death: {}",
        world.interrupted().await.len()
    );
    shards_spread(&world, 2).await;
    world.finish().await;
}

/// #42's five faults in one run, at the default timings (not the fault
/// settings): three instances on a private Redis while 5,000 jobs fire
/// over 15 s; one instance killed with -9, Redis flushed, Redis killed and
/// started again empty, a second instance killed with -9. The survivor
/// delivers everything; the lateness is printed against #42's 8 s (a
/// figure, measured here and in docs/faults.md, not asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_faults_at_the_default_timings_lose_nothing() {
    let mut redis = PrivateRedis::start().await;
    let services = Services {
        redis_url: redis.url(),
        ..Services::shared()
    };
    // The defaults, over the fault settings World starts with.
    let defaults = [
        ("TICKLER_CLUSTER_SHARDS", "16"),
        ("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "5600"),
        ("TICKLER_KAFKA_MESSAGE_TIMEOUT_MS", "3000"),
        ("TICKLER_RECONCILER_INTERVAL_MS", "1000"),
        ("TICKLER_LOADER_INTERVAL_MS", "1000"),
        ("TICKLER_DISPATCHER_IDLE_MS", "1000"),
        ("TICKLER_CLUSTER_INSTANCE_TTL_MS", "5000"),
    ];
    let mut world = World::start_many(services, 3, &defaults).await;
    shards_spread(&world, 3).await;
    let t0 = Utc::now() + secs(3.0);
    let expected = world
        .jobs_schedule(jobs(5000), t0, Duration::from_secs(15))
        .await;
    until(t0 + secs(2.0)).await;
    world.instance_mut(2).kill9();
    until(t0 + secs(5.0)).await;
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    until(t0 + secs(8.0)).await;
    redis.restart().await;
    until(t0 + secs(11.0)).await;
    world.instance_mut(1).kill9();
    verdict(
        &world,
        "five faults at the default timings",
        &expected,
        &HashSet::new(),
        Duration::from_secs(90),
    )
    .await;
    let verdict = check(
        &expected,
        &HashSet::new(),
        &world.interrupted().await,
        &world.seen_audited().await,
    );
    eprintln!(
        "five faults at the default timings (kill -9, FLUSHALL, Redis restart, kill -9; {} jobs over 15 s on three instances): max lateness {} ms (#42: 8000 ms), p50 {} ms",
        expected.len(),
        verdict.lateness_max_ms,
        verdict.lateness_p50_ms
    );
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_paused_past_its_ttl_wins_nothing_when_it_wakes() {
    let world = World::start_many(Services::shared(), 2, &instance_env()).await;
    shards_spread(&world, 2).await;
    let t0 = Utc::now() + secs(3.0);
    let expected = world
        .jobs_schedule(jobs(2000), t0, Duration::from_secs(12))
        .await;
    until(t0 + secs(3.0)).await;
    world.instance(1).pause();
    // Past its TTL: the other takes its shards and rescues its claims.
    shards_spread(&world, 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    world.instance(1).resume();
    verdict(
        &world,
        "SIGSTOP past the TTL, then SIGCONT",
        &expected,
        &HashSet::new(),
        Duration::from_secs(60),
    )
    .await;
    // It comes back as a live instance and gets its share again.
    shards_spread(&world, 2).await;
    world.finish().await;
}

/// A dispatcher that panics, or stalls, stops its whole instance, in order
/// (`app::RoleFailure`): the instance leaves at once, so the other takes
/// its shards and puts its claims in doubt, and `tickler serve` exits
/// non-zero for its supervisor to restart it — not a live-looking process
/// holding its shards while it dispatches nothing. By fail point, in turn:
/// a panic in the dispatcher's own loop with a batch claimed and not yet
/// handed on to be sent; a panic in one of its tasks with records sent
/// whose outcome is not yet recorded; a call that never returns (a
/// half-open connection) with a batch won in MySQL, which the watchdog
/// gives up on after `dispatcher.stall_ms`. Each time nothing is lost, early
/// or doubled, and no claim waits for its 30 s lease.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_that_panics_or_stalls_stops_its_instance_and_the_other_delivers_its_jobs() {
    let mut world = World::start_many(Services::shared(), 2, &instance_env()).await;
    let mut expected = Vec::new();
    for failpoint in [
        "dispatcher-claimed=panic",
        "dispatcher-settle=panic",
        "dispatcher-stall=return",
    ] {
        const SAID: &str = "the dispatcher role stopped on its own";
        let victim = world.instance_mut(1);
        let said_before = victim.log_count(SAID);
        victim.stop();
        victim.env_set("FAILPOINTS", failpoint);
        victim.env_set("TICKLER_DISPATCHER_STALL_MS", "3000");
        victim.start();
        world.healthy_instance(1).await;
        shards_spread(&world, 2).await;
        let t0 = Utc::now() + secs(2.0);
        expected.extend(
            world
                .jobs_schedule(jobs(400), t0, Duration::from_secs(4))
                .await,
        );
        let exited = exit_wait(world.instance_mut(1), Duration::from_secs(60)).await;
        let log = world.instance(1).log_tail();
        let exited =
            exited.unwrap_or_else(|| panic!("{failpoint}: the instance stopped; log:\n{log}"));
        assert!(!exited.success(), "{failpoint}: exits non-zero ({exited})");
        assert!(
            world.instance(1).log_count(SAID) > said_before,
            "{failpoint}: says why; log:\n{log}"
        );
        // It left: its shards were handed over, not waited out.
        shards_spread(&world, 1).await;
        verdict(
            &world,
            failpoint,
            &expected,
            &HashSet::new(),
            Duration::from_secs(60),
        )
        .await;
        let by_lease: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM jobs WHERE last_error LIKE 'claim expired%'")
                .fetch_one(&world.sql)
                .await
                .unwrap();
        assert_eq!(by_lease, 0, "{failpoint}: no claim waited for its lease");
    }
    world.finish().await;
}

/// A stop that cannot finish — here the instance's last call to MySQL, to
/// leave, never returns — is cut short after `shutdown_timeout_ms`: the
/// process exits, status 1, saying so, and the other instance takes its
/// shards once its heartbeat is missed.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_that_hangs_is_cut_short_and_the_other_takes_over() {
    let mut world = World::start_many(Services::shared(), 2, &instance_env()).await;
    let victim = world.instance_mut(1);
    victim.stop();
    victim.env_set("FAILPOINTS", "membership-leave=return");
    victim.env_set("TICKLER_SHUTDOWN_TIMEOUT_MS", "2000");
    victim.start();
    world.healthy_instance(1).await;
    shards_spread(&world, 2).await;
    world.instance(1).terminate();
    let exited = exit_wait(world.instance_mut(1), Duration::from_secs(30)).await;
    let log = world.instance(1).log_tail();
    let exited = exited.unwrap_or_else(|| panic!("the instance exited; log:\n{log}"));
    assert!(!exited.success(), "exits non-zero ({exited})");
    assert!(
        world
            .instance(1)
            .log_count("did not stop within shutdown_timeout_ms")
            > 0,
        "says why; log:\n{log}"
    );
    shards_spread(&world, 1).await;
    let t0 = Utc::now() + secs(1.0);
    let expected = world
        .jobs_schedule(jobs(200), t0, Duration::from_secs(2))
        .await;
    verdict(
        &world,
        "a stop that hangs",
        &expected,
        &HashSet::new(),
        Duration::from_secs(60),
    )
    .await;
    world.finish().await;
}

/// Waits up to `wait` for `proc` to exit; how it exited.
#[cfg(feature = "failpoints")]
async fn exit_wait(
    proc: &mut tickler_testkit::procs::Proc,
    wait: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < deadline {
        if let Some(status) = proc.exit_status() {
            return Some(status);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// What the chaos workload did to the jobs it created.
#[derive(Default)]
struct Ledger {
    expected: Vec<Expected>,
    cancelled: HashSet<u64>,
    /// Cancels that got no answer (the instance was paused or killed under
    /// the call): applied or not, nobody knows.
    maybe_cancelled: HashSet<u64>,
    moved: usize,
    /// Moved by a debounce of their key, answered.
    debounced: usize,
    /// Each created job's key.
    keys: HashMap<u64, String>,
    /// Changes (cancel, move or debounce) that got no answer.
    indeterminate: usize,
    refused: usize,
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Three instances on one database and one Redis, under a steady stream of
/// jobs (some given as wall-clock times; with cancels, reschedules and
/// debounces of their keys mixed in), while a seeded nemesis
/// kills instances with -9, pauses them past their TTL and restarts them.
/// Then the checker: lost 0, early 0, cancelled-but-produced 0, and
/// duplicates only of the allowed kind (same job and attempt, from an
/// interrupted dispatch).
///
/// `TICKLER_CHAOS_SECS` (default 40), `TICKLER_CHAOS_RATE` jobs/s (default
/// 300) and `TICKLER_CHAOS_SEED` (default: random, printed) set the run;
/// `scripts/chaos` runs the long version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_across_three_instances_loses_nothing() {
    use rand::{Rng, SeedableRng};
    use std::sync::{Arc, Mutex};

    let seconds = env_number("TICKLER_CHAOS_SECS", 40);
    let rate = env_number("TICKLER_CHAOS_RATE", 300).max(10);
    let seed = env_number("TICKLER_CHAOS_SEED", rand::random::<u32>() as u64);
    eprintln!("chaos: seed {seed}, {seconds} s at {rate} jobs/s (TICKLER_CHAOS_SEED={seed} repeats the nemesis)");

    let world = Arc::new(tokio::sync::RwLock::new(
        World::start_many(Services::shared(), 3, &instance_env()).await,
    ));
    shards_spread(&*world.read().await, 3).await;
    // Which instances are up (not killed, not paused): the workload calls
    // only those.
    let up = Arc::new(Mutex::new(vec![true; 3]));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);

    // The workload: every 100 ms a batch due 1–6 s ahead, and a few changes
    // of earlier jobs still 3 s or more ahead.
    let workload = {
        let (world, up, ledger) = (world.clone(), up.clone(), ledger.clone());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
        tokio::spawn(async move {
            let per_tick = (rate / 10) as usize;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while tokio::time::Instant::now() < deadline {
                tick.tick().await;
                let world = world.read().await;
                let pick = |rng: &mut rand::rngs::StdRng| {
                    let live: Vec<usize> = up
                        .lock()
                        .unwrap()
                        .iter()
                        .enumerate()
                        .filter(|(_, u)| **u)
                        .map(|(i, _)| i)
                        .collect();
                    live[rng.random_range(0..live.len())]
                };
                // Keyed, so that a debounce can find them; one in ten given
                // as a wall-clock time (UTC's, the same instant).
                let items: Vec<(serde_json::Value, i64)> = (0..per_tick)
                    .map(|n| {
                        let due = Utc::now() + chrono::Duration::milliseconds(rng.random_range(1_000..6_000));
                        let key = format!("c{seed}-{}", rng.random::<u64>());
                        let item = if rng.random_bool(0.1) {
                            serde_json::json!({"topic": world.topic, "key": key, "payload": n,
                                "run_local": due.naive_utc().format("%Y-%m-%dT%H:%M:%S%.3f").to_string(),
                                "time_zone": "Etc/UTC"})
                        } else {
                            serde_json::json!({"topic": world.topic, "key": key, "payload": n, "run_at": due.to_rfc3339()})
                        };
                        (item, due.timestamp_millis())
                    })
                    .collect();
                let body =
                    serde_json::json!({"jobs": items.iter().map(|(j, _)| j).collect::<Vec<_>>()});
                let instance = pick(&mut rng);
                match world
                    .call(
                        instance,
                        reqwest::Method::POST,
                        "/v1/jobs/batch",
                        Some(&body),
                    )
                    .await
                {
                    Some((200, reply)) => {
                        let mut ledger = ledger.lock().unwrap();
                        for (result, (item, due_ms)) in
                            reply["results"].as_array().unwrap().iter().zip(&items)
                        {
                            if result["result"] == "created" {
                                let id = result["id"].as_u64().unwrap();
                                ledger.expected.push(Expected {
                                    id,
                                    due_ms: *due_ms,
                                });
                                ledger
                                    .keys
                                    .insert(id, item["key"].as_str().unwrap().to_owned());
                            }
                        }
                    }
                    // Not answered (the instance died under the call) or
                    // refused: not accepted, nothing promised. An answer
                    // lost after the commit leaves jobs nobody expects,
                    // which the checker ignores.
                    _ => ledger.lock().unwrap().refused += 1,
                }
                // Changes: one in twenty jobs is cancelled or moved.
                let ahead = Utc::now().timestamp_millis() + 3_000;
                let candidates: Vec<Expected> = {
                    let ledger = ledger.lock().unwrap();
                    ledger
                        .expected
                        .iter()
                        .rev()
                        .take(per_tick * 20)
                        .filter(|e| e.due_ms > ahead && !ledger.cancelled.contains(&e.id))
                        .copied()
                        .collect()
                };
                for job in candidates.iter().take(per_tick / 10) {
                    let instance = pick(&mut rng);
                    let key = ledger.lock().unwrap().keys.get(&job.id).cloned();
                    if let (Some(key), true) = (key, rng.random_bool(0.25)) {
                        // A debounce of its key: the pending job moves (or,
                        // had it gone out, a new generation starts).
                        let shift_ms: i64 = if rng.random_bool(0.5) { 1_500 } else { -1_000 };
                        let due_ms = job.due_ms + shift_ms;
                        let run_at = chrono::DateTime::from_timestamp_millis(due_ms).unwrap();
                        let body = serde_json::json!({"topic": world.topic, "key": key,
                            "payload": "debounced", "run_at": run_at.to_rfc3339(),
                            "on_conflict": "debounce", "max_delay_ms": 600_000});
                        let answer = world
                            .call(instance, reqwest::Method::POST, "/v1/jobs", Some(&body))
                            .await;
                        let mut ledger = ledger.lock().unwrap();
                        match answer {
                            Some((200, moved)) if moved["id"].as_u64() == Some(job.id) => {
                                ledger.debounced += 1;
                                let at = moved["run_at"]
                                    .as_str()
                                    .and_then(|at| at.parse::<chrono::DateTime<Utc>>().ok())
                                    .map_or(due_ms, |at| at.timestamp_millis());
                                if let Some(e) =
                                    ledger.expected.iter_mut().rev().find(|e| e.id == job.id)
                                {
                                    e.due_ms = at;
                                }
                            }
                            Some((201, created)) => {
                                // The job had gone out: a new one, expected too.
                                ledger.expected.push(Expected {
                                    id: created["id"].as_u64().unwrap(),
                                    due_ms,
                                });
                            }
                            Some(_) => {}
                            None => {
                                ledger.indeterminate += 1;
                                if let Some(e) =
                                    ledger.expected.iter_mut().rev().find(|e| e.id == job.id)
                                {
                                    e.due_ms = e.due_ms.min(due_ms);
                                }
                            }
                        }
                    } else if rng.random_bool(0.5) {
                        let path = format!("/v1/jobs/{}", job.id);
                        match world
                            .call(instance, reqwest::Method::DELETE, &path, None)
                            .await
                        {
                            Some((200, _)) => {
                                ledger.lock().unwrap().cancelled.insert(job.id);
                            }
                            Some(_) => {}
                            None => {
                                let mut ledger = ledger.lock().unwrap();
                                ledger.maybe_cancelled.insert(job.id);
                                ledger.indeterminate += 1;
                            }
                        }
                    } else {
                        let shift_ms: i64 = if rng.random_bool(0.5) { 2_000 } else { -1_500 };
                        let due_ms = job.due_ms + shift_ms;
                        let run_at = chrono::DateTime::from_timestamp_millis(due_ms).unwrap();
                        let body = serde_json::json!({"version": 1, "run_at": run_at.to_rfc3339()});
                        let path = format!("/v1/jobs/{}", job.id);
                        let answer = world
                            .call(instance, reqwest::Method::PATCH, &path, Some(&body))
                            .await;
                        let mut ledger = ledger.lock().unwrap();
                        let moved = match answer {
                            Some((200, _)) => {
                                ledger.moved += 1;
                                Some(due_ms)
                            }
                            Some(_) => None,
                            // Moved or not: it must not arrive before the
                            // earlier of the two times.
                            None => {
                                ledger.indeterminate += 1;
                                Some(due_ms.min(job.due_ms))
                            }
                        };
                        if let Some(due_ms) = moved {
                            if let Some(e) =
                                ledger.expected.iter_mut().rev().find(|e| e.id == job.id)
                            {
                                e.due_ms = due_ms;
                            }
                        }
                    }
                }
            }
        })
    };

    // The nemesis: every 3–6 s, one instance killed with -9 (back after
    // 0.5–2 s), paused past its TTL (2.5–4.5 s), or stopped and restarted;
    // never the last one up.
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut faults = Vec::new();
    while tokio::time::Instant::now() + Duration::from_secs(6) < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(3_000..6_000))).await;
        let victim = rng.random_range(0..3);
        let action = rng.random_range(0..3);
        if up.lock().unwrap().iter().filter(|u| **u).count() < 2 {
            continue;
        }
        up.lock().unwrap()[victim] = false;
        let mut w = world.write().await;
        let (name, out_ms) = match action {
            0 => {
                w.instance_mut(victim).kill9();
                ("kill -9", rng.random_range(500..2_000))
            }
            1 => {
                w.instance(victim).pause();
                ("SIGSTOP", rng.random_range(2_500..4_500))
            }
            _ => {
                w.instance_mut(victim).stop();
                ("restart", 200)
            }
        };
        drop(w);
        tokio::time::sleep(Duration::from_millis(out_ms)).await;
        let mut w = world.write().await;
        if action == 1 {
            w.instance(victim).resume();
        } else {
            w.instance_mut(victim).start();
        }
        drop(w);
        world.read().await.healthy_instance(victim).await;
        up.lock().unwrap()[victim] = true;
        faults.push(format!("{name} {victim} for {out_ms} ms"));
    }
    workload.await.unwrap();
    eprintln!("chaos: seed {seed}, faults: {}", faults.join(", "));

    let world = Arc::try_unwrap(world)
        .ok()
        .expect("the tasks are done")
        .into_inner();
    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    eprintln!(
        "chaos: {} jobs accepted, {} cancelled, {} moved, {} debounced, {} changes and {} creates not answered",
        ledger.expected.len(),
        ledger.cancelled.len(),
        ledger.moved,
        ledger.debounced,
        ledger.indeterminate,
        ledger.refused
    );
    // At least one fault per 15 s (one every 3–6 s plus the time to come
    // back, which a loaded machine stretches).
    assert!(
        faults.len() as u64 >= (seconds / 15).max(1),
        "the nemesis struck: {faults:?}"
    );
    let mut awaited = ids(&ledger.expected, &ledger.cancelled);
    awaited.retain(|id| !ledger.maybe_cancelled.contains(id));
    world.await_seen(&awaited, Duration::from_secs(90)).await;
    let verdict = check_with(
        &ledger.expected,
        &ledger.cancelled,
        &ledger.maybe_cancelled,
        &world.interrupted().await,
        &world.seen_audited().await,
    );
    world.explain(&verdict).await;
    verdict.assert_clean(&format!("chaos across three instances (seed {seed})"));
    world.finish().await;
}

/// What the cancel nemesis's workload did, and how each change was answered.
#[derive(Default)]
struct Aimed {
    /// Every job accepted: id → the time it must not arrive before.
    due: HashMap<u64, i64>,
    /// Ids in creation order: the last few hundred are those due about now.
    order: Vec<u64>,
    /// Cancels answered 200 `cancelled`.
    cancelled: HashSet<u64>,
    /// Cancels that got no answer: applied or not, nobody knows.
    maybe_cancelled: HashSet<u64>,
    /// id → the `run_at` its last PATCH answered 200 set (ms).
    moved: HashMap<u64, i64>,
    /// "cancel 409 in_flight" → how many, and so on.
    answers: BTreeMap<String, usize>,
    /// Creates not answered 200.
    refused: usize,
}

impl Aimed {
    fn answered(&mut self, what: &str, answer: &Option<(u16, serde_json::Value)>) {
        let key = match answer {
            None => format!("{what}: no answer"),
            Some((status, reply)) => {
                let code = reply["outcome"]
                    .as_str()
                    .or(reply["error"]["code"].as_str())
                    .unwrap_or("");
                format!("{what}: {status} {code}")
            }
        };
        *self.answers.entry(key).or_default() += 1;
    }
}

/// Cancels and PATCHes aimed at the jobs most likely in flight, rescued or
/// in doubt — those due this very second, and rows `dispatching` right now
/// — on two instances whose broker (a private tansu) and selves a seeded
/// nemesis pauses: the broker SIGSTOPped for 1–4 s; an instance SIGSTOPped
/// past its TTL; the broker SIGSTOPped, then an instance (holding claims
/// whose sends wait on the broker) past its TTL, the broker resumed while
/// the instance still sleeps; an instance sent SIGTERM while the broker is
/// paused, so it drains into a broker that does not answer, then started
/// again. Every answer is recorded; the checker
/// then holds tickler to what it said: cancelled-but-produced 0 (a cancel
/// answered 200 `cancelled`), patched-but-old-time 0 (a PATCH answered 200:
/// no record with an earlier `tickler-scheduled-at`), lost 0, early 0, and
/// duplicates only of jobs whose claim a fault interrupted.
///
/// `TICKLER_NEMESIS_SECS` (default 45), `TICKLER_NEMESIS_RATE` jobs/s
/// (default 30) and `TICKLER_NEMESIS_SEED` (default: random, printed) set
/// the run; `scripts/chaos --cancel-nemesis` runs the long version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_and_patches_aimed_at_in_flight_jobs_never_break_a_promise() {
    use rand::seq::{IndexedRandom, SliceRandom};
    use rand::{Rng, SeedableRng};
    use std::sync::{Arc, Mutex};

    let seconds = env_number("TICKLER_NEMESIS_SECS", 45);
    let rate = env_number("TICKLER_NEMESIS_RATE", 30).max(10);
    let seed = env_number("TICKLER_NEMESIS_SEED", rand::random::<u32>() as u64);
    eprintln!(
        "cancel nemesis: seed {seed}, {seconds} s at {rate} jobs/s \
         (TICKLER_NEMESIS_SEED={seed} repeats the nemesis)"
    );

    let mut tansu = PrivateTansu::start_memory().await;
    let services = Services {
        brokers: tansu.brokers(),
        ..Services::shared()
    };
    // Jobs are claimed up to 1 s ahead (the most allowed) and held until
    // their time, so an
    // instance paused at any moment holds claims.
    let mut env = instance_env();
    env.push(("TICKLER_DISPATCHER_LOOKAHEAD_MS", "1000"));
    let world = Arc::new(tokio::sync::RwLock::new(
        World::start_many(services, 2, &env).await,
    ));
    shards_spread(&*world.read().await, 2).await;
    // Which instances answer (not paused, not draining): the workload calls
    // only those.
    let up = Arc::new(Mutex::new(vec![true; 2]));
    let aimed = Arc::new(Mutex::new(Aimed::default()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);

    // The workload: every 100 ms a batch due 0.5–3 s ahead; then two jobs
    // due within a second of now and two rows `dispatching` now, each
    // cancelled or moved 5 s later.
    let workload = {
        let (world, up, aimed) = (world.clone(), up.clone(), aimed.clone());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
        tokio::spawn(async move {
            let per_tick = (rate / 10) as usize;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while tokio::time::Instant::now() < deadline {
                tick.tick().await;
                let world = world.read().await;
                let live = |rng: &mut rand::rngs::StdRng| -> Option<usize> {
                    let live: Vec<usize> = (0..2).filter(|i| up.lock().unwrap()[*i]).collect();
                    live.choose(rng).copied()
                };
                let Some(instance) = live(&mut rng) else {
                    continue;
                };
                let items: Vec<(serde_json::Value, i64)> = (0..per_tick)
                    .map(|n| {
                        let due = Utc::now()
                            + chrono::Duration::milliseconds(rng.random_range(500..3_000));
                        (
                            serde_json::json!({"topic": world.topic, "payload": n, "run_at": due.to_rfc3339()}),
                            due.timestamp_millis(),
                        )
                    })
                    .collect();
                let body =
                    serde_json::json!({"jobs": items.iter().map(|(j, _)| j).collect::<Vec<_>>()});
                match world
                    .call(
                        instance,
                        reqwest::Method::POST,
                        "/v1/jobs/batch",
                        Some(&body),
                    )
                    .await
                {
                    Some((200, reply)) => {
                        let mut aimed = aimed.lock().unwrap();
                        for (result, (_, due_ms)) in
                            reply["results"].as_array().unwrap().iter().zip(&items)
                        {
                            if result["result"] == "created" {
                                let id = result["id"].as_u64().unwrap();
                                aimed.due.insert(id, *due_ms);
                                aimed.order.push(id);
                            }
                        }
                    }
                    // Not accepted, nothing promised; an answer lost after
                    // the commit leaves jobs nobody expects, which the
                    // checker ignores.
                    _ => aimed.lock().unwrap().refused += 1,
                }

                // The targets: due within a second of now (about to be
                // claimed, claimed, or produced a moment ago)...
                let now_ms = Utc::now().timestamp_millis();
                let mut targets: Vec<u64> = {
                    let aimed = aimed.lock().unwrap();
                    aimed
                        .order
                        .iter()
                        .rev()
                        .take(per_tick * 80)
                        .filter(|id| {
                            (aimed.due[*id] - now_ms).abs() <= 1_000
                                && !aimed.cancelled.contains(*id)
                        })
                        .copied()
                        .collect()
                };
                targets.shuffle(&mut rng);
                targets.truncate(2);
                // ...and rows held by a dispatcher or in doubt right now.
                let dispatching: Vec<u64> =
                    sqlx::query_scalar("SELECT id FROM jobs WHERE status = 'dispatching' LIMIT 50")
                        .fetch_all(&world.sql)
                        .await
                        .unwrap_or_default();
                targets.extend(dispatching.choose_multiple(&mut rng, 2).copied());

                for id in targets {
                    let Some(old_ms) = aimed.lock().unwrap().due.get(&id).copied() else {
                        continue;
                    };
                    let Some(instance) = live(&mut rng) else {
                        break;
                    };
                    let path = format!("/v1/jobs/{id}");
                    if rng.random_bool(0.5) {
                        let answer = world
                            .call(instance, reqwest::Method::DELETE, &path, None)
                            .await;
                        let mut aimed = aimed.lock().unwrap();
                        aimed.answered("cancel", &answer);
                        match answer {
                            Some((200, reply)) if reply["outcome"] == "cancelled" => {
                                aimed.cancelled.insert(id);
                            }
                            Some(_) => {}
                            None => {
                                aimed.maybe_cancelled.insert(id);
                            }
                        }
                    } else {
                        // A PATCH carries the version read: read it first.
                        let read = world
                            .call(instance, reqwest::Method::GET, &path, None)
                            .await;
                        let Some((200, job)) = read else {
                            aimed.lock().unwrap().answered("read before patch", &read);
                            continue;
                        };
                        let new_ms = now_ms.max(old_ms) + 5_000;
                        let run_at = chrono::DateTime::from_timestamp_millis(new_ms).unwrap();
                        let body = serde_json::json!({
                            "version": job["version"], "run_at": run_at.to_rfc3339(),
                        });
                        let answer = world
                            .call(instance, reqwest::Method::PATCH, &path, Some(&body))
                            .await;
                        let mut aimed = aimed.lock().unwrap();
                        aimed.answered("patch", &answer);
                        match answer {
                            Some((200, _)) => {
                                aimed.moved.insert(id, new_ms);
                                aimed.due.insert(id, new_ms);
                            }
                            Some(_) => {}
                            // Moved or not: it must not arrive before the
                            // earlier of the two times, which is the old.
                            None => {}
                        }
                    }
                }
            }
        })
    };

    // The nemesis: every 1–3 s one fault, over once it has come back.
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut faults = Vec::new();
    let mut slow_exits = 0;
    let ttl_ms = INSTANCE_TTL_MS as u64;
    while tokio::time::Instant::now() + Duration::from_secs(8) < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..3_000))).await;
        let victim = rng.random_range(0..2);
        match rng.random_range(0..5) {
            0 => {
                let out_ms = rng.random_range(1_000..4_000);
                tansu.proc.pause();
                tokio::time::sleep(Duration::from_millis(out_ms)).await;
                tansu.proc.resume();
                faults.push(format!("broker SIGSTOP {out_ms} ms"));
            }
            strike @ (1 | 4) => {
                // 1: past its TTL. 4: a dead instance comes back to life —
                // paused with claims in hand until the other has put them in
                // doubt, read their topic back (nothing) and returned them
                // to pending, where the workload's cancels and PATCHes find
                // them; then it wakes and beats again, and must send none.
                let revived = strike == 4;
                let past_ms = if revived { REVIVE_QUIET_MS } else { 0 };
                let out_ms = ttl_ms + past_ms + rng.random_range(1_000..3_000);
                up.lock().unwrap()[victim] = false;
                world.read().await.instance(victim).pause();
                tokio::time::sleep(Duration::from_millis(out_ms)).await;
                world.read().await.instance(victim).resume();
                world.read().await.healthy_instance(victim).await;
                up.lock().unwrap()[victim] = true;
                let past = if revived {
                    ", past its claims' read-back"
                } else {
                    ""
                };
                faults.push(format!("SIGSTOP {victim} {out_ms} ms{past}"));
            }
            2 => {
                // SIGTERM while the broker does not answer: the instance
                // drains into a broker that may or may not have taken its
                // last sends.
                let out_ms = rng.random_range(1_000..4_000);
                up.lock().unwrap()[victim] = false;
                tansu.proc.pause();
                world.read().await.instance(victim).terminate();
                tokio::time::sleep(Duration::from_millis(out_ms)).await;
                tansu.proc.resume();
                let exited = tickler_testkit::eventually(Duration::from_secs(60), || async {
                    world
                        .write()
                        .await
                        .instance_mut(victim)
                        .exited()
                        .then_some(())
                })
                .await;
                if exited.is_none() {
                    slow_exits += 1;
                    eprintln!(
                        "cancel nemesis: instance {victim} still draining 60 s after SIGTERM; \
                         killed with -9; log:\n{}",
                        world.read().await.instance(victim).log_tail()
                    );
                    world.write().await.instance_mut(victim).kill9();
                }
                world.write().await.instance_mut(victim).start();
                world.read().await.healthy_instance(victim).await;
                up.lock().unwrap()[victim] = true;
                faults.push(format!(
                    "SIGTERM {victim} under a broker paused {out_ms} ms"
                ));
            }
            _ => {
                // Dead with sends in the air: the broker paused first, so
                // the instance's claims wait on it; then the instance
                // paused past its TTL; the broker resumed while it still
                // sleeps, taking what was on the wire.
                let out_ms = ttl_ms + rng.random_range(1_000..3_000);
                let lead_ms = rng.random_range(200..1_000);
                let broker_ms = rng.random_range(500..2_000);
                tansu.proc.pause();
                tokio::time::sleep(Duration::from_millis(lead_ms)).await;
                up.lock().unwrap()[victim] = false;
                world.read().await.instance(victim).pause();
                tokio::time::sleep(Duration::from_millis(broker_ms)).await;
                tansu.proc.resume();
                tokio::time::sleep(Duration::from_millis(out_ms - broker_ms)).await;
                world.read().await.instance(victim).resume();
                world.read().await.healthy_instance(victim).await;
                up.lock().unwrap()[victim] = true;
                faults.push(format!(
                    "broker SIGSTOP, {lead_ms} ms later SIGSTOP {victim} {out_ms} ms, \
                     the broker back {broker_ms} ms into it"
                ));
            }
        }
    }
    workload.await.unwrap();
    eprintln!("cancel nemesis: seed {seed}, faults: {}", faults.join(", "));
    // Without it nothing below means anything (a `pkill -x tansu` elsewhere
    // on the machine takes private brokers too).
    assert!(
        !tansu.proc.exited(),
        "the private broker is still running; its log:\n{}",
        tansu.proc.log_tail()
    );

    let world = Arc::try_unwrap(world)
        .ok()
        .expect("the tasks are done")
        .into_inner();
    let aimed = std::mem::take(&mut *aimed.lock().unwrap());
    eprintln!(
        "cancel nemesis: {} jobs accepted, {} cancelled, {} cancels not answered, {} moved, \
         {} creates not answered or refused",
        aimed.due.len(),
        aimed.cancelled.len(),
        aimed.maybe_cancelled.len(),
        aimed.moved.len(),
        aimed.refused
    );
    eprintln!("cancel nemesis: answers {:?}", aimed.answers);
    assert!(
        faults.len() as u64 >= (seconds / 15).max(1),
        "the nemesis struck: {faults:?}"
    );
    assert_eq!(slow_exits, 0, "every instance sent SIGTERM exited");

    let expected: Vec<Expected> = aimed
        .due
        .iter()
        .map(|(id, due_ms)| Expected {
            id: *id,
            due_ms: *due_ms,
        })
        .collect();
    let mut awaited = ids(&expected, &aimed.cancelled);
    awaited.retain(|id| !aimed.maybe_cancelled.contains(id));
    world.await_seen(&awaited, Duration::from_secs(90)).await;
    // Which faults the claims met (tickler writes why in last_error), and
    // how they ended.
    let why: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT CAST(LEFT(last_error, 60) AS CHAR), CAST(status AS CHAR), COUNT(*) FROM jobs \
         WHERE last_error IS NOT NULL GROUP BY 1, 2 ORDER BY 3 DESC",
    )
    .fetch_all(&world.sql)
    .await
    .unwrap_or_default();
    eprintln!("cancel nemesis: interrupted claims by last_error {why:?}");
    let verdict = check_moved(
        &expected,
        &aimed.cancelled,
        &aimed.maybe_cancelled,
        &aimed.moved,
        &world.interrupted().await,
        &world.seen_audited().await,
    );
    world.explain(&verdict).await;
    verdict.assert_clean(&format!(
        "cancels and patches aimed at jobs in flight (seed {seed})"
    ));
    assert!(
        !aimed.cancelled.is_empty() && !aimed.moved.is_empty(),
        "some cancels and some PATCHes took effect: {:?}",
        aimed.answers
    );
    world.finish().await;
}

/// The documented procedure (docs/scaling.md) on a running deployment of
/// two instances: `tickler shards resize 64` while jobs fire. Nothing is
/// lost, early or produced twice; the shards spread again; the old key
/// layout is emptied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_the_shard_count_while_jobs_fire_loses_doubles_and_hurries_nothing() {
    let env = [
        ("TICKLER_CLUSTER_INSTANCE_TTL_MS", "2000"),
        ("TICKLER_CLUSTER_SHARDS", "16"),
    ];
    let world = World::start_many(Services::shared(), 2, &env).await;
    shards_spread(&world, 2).await;
    let t0 = Utc::now() + secs(3.0);
    let expected = world
        .jobs_schedule(jobs(3000), t0, Duration::from_secs(12))
        .await;
    until(t0 + secs(4.0)).await;
    let resized = std::process::Command::new(tickler_testkit::procs::tickler_bin())
        .args(["shards", "resize", "64"])
        .env("TICKLER_MYSQL_URL", &world.mysql_url)
        .output()
        .unwrap();
    assert!(
        resized.status.success(),
        "{}",
        String::from_utf8_lossy(&resized.stderr)
    );
    assert!(String::from_utf8_lossy(&resized.stdout).contains("from 16 to 64"));
    let lowered = std::process::Command::new(tickler_testkit::procs::tickler_bin())
        .args(["shards", "resize", "8"])
        .env("TICKLER_MYSQL_URL", &world.mysql_url)
        .output()
        .unwrap();
    assert!(!lowered.status.success(), "lowering is refused");
    assert!(String::from_utf8_lossy(&lowered.stderr).contains("only be raised"));

    world
        .await_seen(&ids(&expected, &HashSet::new()), Duration::from_secs(60))
        .await;
    let verdict = check(
        &expected,
        &HashSet::new(),
        &world.interrupted().await,
        &world.seen_audited().await,
    );
    verdict.assert_clean("shards raised from 16 to 64 while jobs fire");
    assert!(
        verdict.explained_duplicates.is_empty(),
        "no fault here, so no duplicate at all: {:?}",
        verdict.explained_duplicates
    );
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM shard_leases")
        .fetch_one(&world.sql)
        .await
        .unwrap();
    assert_eq!(count, 64);
    shards_spread(&world, 2).await;
    let redis = redis::Client::open(world.services.redis_url.as_str()).unwrap();
    let conn = redis.get_multiplexed_async_connection().await.unwrap();
    let old_layout = format!("{{{}:16:*", world.redis_prefix);
    let emptied = tickler_testkit::eventually(Duration::from_secs(20), || {
        let mut conn = conn.clone();
        let pattern = old_layout.clone();
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut conn)
                .await
                .ok()?;
            keys.is_empty().then_some(())
        }
    })
    .await;
    assert!(
        emptied.is_some(),
        "the 16-shard keys are drained and deleted"
    );
    world.finish().await;
}
