//! The store's methods on `instances` and `shard_leases`
//! (src/store/cluster.rs): who is alive by the database's clock, who owns
//! each shard at which epoch, the fence a claim must pass, and the rescue of
//! a dead instance's claims (src/store/dispatch.rs) — what each answers and
//! what it leaves alone.

use std::time::Duration;

use chrono::Utc;
use tickler::config::Role;
use tickler::domain::job::{JobId, Status};
use tickler::store::{Beat, Cancelled, Dispatched, Fence, InstanceInfo, LeaseRow, Store};
use tickler_testkit::store::{Db, LEASE, SHARDS};

fn info(host: &str, pid: u32) -> InstanceInfo {
    InstanceInfo {
        host: host.to_owned(),
        pid,
        pid_namespace: Some("pid:[4026531836]".to_owned()),
        version: "1.2.3".to_owned(),
        roles: "dispatcher,api".to_owned(),
        ttl: None,
        quiet: None,
        ingress_group: None,
        enc_keys: None,
    }
}

async fn lease(store: &Store, shard: u32) -> LeaseRow {
    store.shard_leases().await.unwrap()[shard as usize]
}

const MINUTE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// instances

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_registers_beats_its_heart_and_is_listed_alive_by_the_database_clock() {
    let db = Db::new().await;
    let before = db.store.db_now().await.unwrap();
    let me = info("host-a", 11);
    let id = db.store.instance_register(&me).await.unwrap();
    let listed = db.store.instances_list(MINUTE).await.unwrap();
    assert_eq!(
        listed.iter().map(|i| i.id).collect::<Vec<_>>(),
        [db.fence.instance, id],
        "in id order"
    );
    let row = &listed[1];
    assert_eq!(
        (
            row.host.as_str(),
            row.pid,
            row.pid_namespace.as_deref(),
            row.version.as_str()
        ),
        ("host-a", 11, Some("pid:[4026531836]"), "1.2.3")
    );
    assert_eq!(row.roles, ["dispatcher", "api"]);
    assert!(row.has_role(Role::Api) && !row.has_role(Role::Results));
    assert!(row.live && row.started_at >= before && row.heartbeat_at == row.started_at);

    // Silent past the TTL: dead for everyone, until it beats again.
    db.edit(
        "UPDATE instances SET heartbeat_at = UTC_TIMESTAMP(3) - INTERVAL 10 MINUTE WHERE id = ?",
        id,
    )
    .await;
    let row = db
        .store
        .instances_list(MINUTE)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(!row.live);
    assert!(
        db.store
            .instances_list(Duration::from_secs(3_600))
            .await
            .unwrap()[1]
            .live
    );
    assert_eq!(
        db.store.instance_heartbeat(id, &me, MINUTE).await.unwrap(),
        Beat::Lapsed,
        "its row was there, ten minutes old: the others took it for dead"
    );
    assert_eq!(
        db.store.instance_heartbeat(id, &me, MINUTE).await.unwrap(),
        Beat::Kept,
        "alive until this beat"
    );
    let row = db
        .store
        .instances_list(MINUTE)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(row.live && row.heartbeat_at > row.started_at);

    // Purged while away: the beat puts its row back, under its id, and
    // says so.
    assert!(db.store.instance_forget(id, "host-a", 11).await.unwrap());
    assert_eq!(db.store.instances_list(MINUTE).await.unwrap().len(), 1);
    assert_eq!(
        db.store.instance_heartbeat(id, &me, MINUTE).await.unwrap(),
        Beat::Gone,
        "it was gone"
    );
    let row = db
        .store
        .instances_list(MINUTE)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!((row.id, row.host.as_str(), row.live), (id, "host-a", true));
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_deletes_an_instance_only_if_it_is_still_that_process() {
    let db = Db::new().await;
    let id = db
        .store
        .instance_register(&info("host-a", 11))
        .await
        .unwrap();
    assert!(!db.store.instance_forget(id, "host-b", 11).await.unwrap());
    assert!(!db.store.instance_forget(id, "host-a", 12).await.unwrap());
    assert!(!db
        .store
        .instance_forget(id + 1, "host-a", 11)
        .await
        .unwrap());
    assert_eq!(db.store.instances_list(MINUTE).await.unwrap().len(), 2);
    assert!(db.store.instance_forget(id, "host-a", 11).await.unwrap());
    assert!(!db.store.instance_forget(id, "host-a", 11).await.unwrap());
    let left: Vec<u64> = db
        .store
        .instances_list(MINUTE)
        .await
        .unwrap()
        .iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(left, [db.fence.instance]);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_only_instances_silent_for_longer_than_its_age() {
    let db = Db::new().await;
    let gone = db
        .store
        .instance_register(&info("host-a", 11))
        .await
        .unwrap();
    let napping = db
        .store
        .instance_register(&info("host-b", 12))
        .await
        .unwrap();
    db.edit(
        "UPDATE instances SET heartbeat_at = UTC_TIMESTAMP(3) - INTERVAL 2 DAY WHERE id = ?",
        gone,
    )
    .await;
    db.edit(
        "UPDATE instances SET heartbeat_at = UTC_TIMESTAMP(3) - INTERVAL 1 HOUR WHERE id = ?",
        napping,
    )
    .await;
    let day = Duration::from_secs(86_400);
    assert_eq!(db.store.instances_purge(day).await.unwrap(), 1);
    assert_eq!(db.store.instances_purge(day).await.unwrap(), 0);
    let left: Vec<u64> = db
        .store
        .instances_list(MINUTE)
        .await
        .unwrap()
        .iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(left, [db.fence.instance, napping]);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_hands_back_every_shard_of_the_instance_and_deletes_its_row() {
    let db = Db::new().await;
    let other = db
        .store
        .instance_register(&info("host-a", 11))
        .await
        .unwrap();
    let (shard, epoch) = db.fence.leases[1];
    assert_eq!(
        db.store.shard_acquire(shard, epoch, other).await.unwrap(),
        Some(epoch + 1)
    );
    let before = db.store.shard_leases().await.unwrap();
    db.store.instance_leave(other).await.unwrap();
    let after = db.store.shard_leases().await.unwrap();
    assert_eq!(
        after[1],
        LeaseRow {
            shard,
            owner: None,
            epoch: epoch + 2
        },
        "free, at a new epoch"
    );
    for n in [0, 2, 3] {
        assert_eq!(after[n], before[n], "the others' shards are theirs");
    }
    let left: Vec<u64> = db
        .store
        .instances_list(MINUTE)
        .await
        .unwrap()
        .iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(left, [db.fence.instance]);
    db.store.instance_leave(404_404).await.unwrap();
    assert_eq!(db.store.shard_leases().await.unwrap(), after);
    db.finish().await;
}

// ---------------------------------------------------------------------------
// shard leases

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_rows_are_made_once_and_raised_never_lowered() {
    let db = Db::new().await;
    assert_eq!(
        db.store.shard_leases_ensure(8).await.unwrap(),
        SHARDS,
        "a deployment keeps the count it started with"
    );
    assert_eq!(
        db.store.shard_leases().await.unwrap().len(),
        SHARDS as usize
    );

    // A first start.
    sqlx::query("DELETE FROM shard_leases")
        .execute(&db.sql)
        .await
        .unwrap();
    assert_eq!(db.store.shard_leases_ensure(3).await.unwrap(), 3);
    assert_eq!(
        db.store.shard_leases().await.unwrap(),
        (0..3)
            .map(|shard| LeaseRow {
                shard,
                owner: None,
                epoch: 0
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(db.store.shard_leases_ensure(5).await.unwrap(), 3);

    let taken = db
        .store
        .shard_acquire(0, 0, db.fence.instance)
        .await
        .unwrap();
    assert_eq!(taken, Some(1));
    assert_eq!(
        db.store.shard_leases_raise(6).await.unwrap(),
        3,
        "the count before"
    );
    let leases = db.store.shard_leases().await.unwrap();
    assert_eq!(leases.len(), 6);
    assert_eq!(
        leases[0],
        LeaseRow {
            shard: 0,
            owner: Some(db.fence.instance),
            epoch: 1
        },
        "existing leases are kept"
    );
    assert!(leases[3..]
        .iter()
        .all(|l| l.owner.is_none() && l.epoch == 0));
    assert_eq!(db.store.shard_leases_raise(6).await.unwrap(), 6);
    assert_eq!(db.store.shard_leases_raise(2).await.unwrap(), 6);
    assert_eq!(
        db.store.shard_leases().await.unwrap(),
        leases,
        "never lowered"
    );
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_takes_a_shard_only_at_the_epoch_read_and_release_only_the_owners() {
    let db = Db::new().await;
    let me = db.fence.instance;
    let other = db
        .store
        .instance_register(&info("host-a", 11))
        .await
        .unwrap();
    let (one, epoch_one) = db.fence.leases[1];
    let (two, epoch_two) = db.fence.leases[2];

    assert_eq!(
        db.store
            .shard_acquire(one, epoch_one - 1, other)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        db.store.shard_acquire(one, epoch_one, other).await.unwrap(),
        Some(epoch_one + 1)
    );
    assert_eq!(
        db.store.shard_acquire(one, epoch_one, me).await.unwrap(),
        None,
        "taken since it was read"
    );
    assert_eq!(
        lease(&db.store, one).await,
        LeaseRow {
            shard: one,
            owner: Some(other),
            epoch: epoch_one + 1
        }
    );
    assert_eq!(
        db.store.shard_acquire(404, 0, me).await.unwrap(),
        None,
        "no such shard"
    );

    assert_eq!(db.store.shard_release(&[one, two], me).await.unwrap(), 1);
    assert_eq!(
        lease(&db.store, two).await,
        LeaseRow {
            shard: two,
            owner: None,
            epoch: epoch_two + 1
        }
    );
    assert_eq!(
        lease(&db.store, one).await.owner,
        Some(other),
        "not mine to release"
    );
    assert_eq!(db.store.shard_release(&[], me).await.unwrap(), 0);
    assert_eq!(
        db.store
            .shard_acquire(two, epoch_two + 1, other)
            .await
            .unwrap(),
        Some(epoch_two + 2),
        "a released shard is free to take"
    );
    db.finish().await;
}

// ---------------------------------------------------------------------------
// fencing

/// A paused instance that lost its shard wakes with a fence at the old
/// epoch: its compare-and-set wins nothing, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_under_a_lost_lease_or_by_a_dead_instance_wins_nothing() {
    let db = Db::new().await;
    let due = db.job(-1_000, 5).await;
    // Another instance takes shard 0 over (epoch + 1).
    let other = db
        .store
        .instance_register(&tickler::store::InstanceInfo {
            host: "other".to_owned(),
            pid: 1,
            pid_namespace: None,
            version: "test".to_owned(),
            roles: "dispatcher".to_owned(),
            ttl: None,
            quiet: None,
            ingress_group: None,
            enc_keys: None,
        })
        .await
        .unwrap();
    let (shard, epoch) = db.fence.leases[0];
    let taken = db.store.shard_acquire(shard, epoch, other).await.unwrap();
    assert_eq!(taken, Some(epoch + 1));
    let stale = Fence {
        leases: vec![(shard, epoch)],
        ..db.fence.clone()
    };
    let outcome = db
        .store
        .job_claim_many(&[due], 7, LEASE, &stale)
        .await
        .unwrap();
    assert!(outcome.won.is_empty(), "the old epoch wins nothing");
    assert_eq!(outcome.fenced, [due], "and says it was fenced off");
    let current = Fence {
        instance: other,
        leases: vec![(shard, epoch + 1)],
        ..db.fence.clone()
    };
    // The new owner's heartbeat goes silent past its TTL: dead for
    // everyone, its claims too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let short = Fence {
        ttl: Duration::from_millis(200),
        ..current.clone()
    };
    let outcome = db
        .store
        .job_claim_many(&[due], 8, LEASE, &short)
        .await
        .unwrap();
    assert_eq!(outcome.fenced, [due], "a dead instance wins nothing");
    let outcome = db
        .store
        .job_claim_many(&[due], 9, LEASE, &current)
        .await
        .unwrap();
    assert_eq!(outcome.won.len(), 1, "the live owner at the new epoch wins");
    db.finish().await;
}

/// A fence proves every shard it names: one lease not held (or a shard
/// released) fences the whole claim off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_holds_only_while_the_instance_holds_every_shard_it_names() {
    let db = Db::new().await;
    let due = db.job(-1_000, 5).await;
    let (two, _) = db.fence.leases[2];
    db.store
        .shard_release(&[two], db.fence.instance)
        .await
        .unwrap();
    let outcome = db
        .store
        .job_claim_many(&[due], 1, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(outcome.fenced, [due]);
    assert_eq!(db.store.job_get(due).await.unwrap().status, Status::Pending);
    let without = Fence {
        leases: db
            .fence
            .leases
            .iter()
            .copied()
            .filter(|(shard, _)| *shard != two)
            .collect(),
        ..db.fence.clone()
    };
    assert_eq!(
        db.store
            .job_claim_many(&[due], 2, LEASE, &without)
            .await
            .unwrap()
            .won
            .len(),
        1
    );
    db.finish().await;
}

// ---------------------------------------------------------------------------
// rescue_dead

/// The claims of an instance silent past its TTL are put in doubt at once
/// (it may have handed their records to the broker, or may still if it is
/// only paused): they stay `dispatching`, so a cancel cannot answer
/// `cancelled`, until the reconciler has read their topic back after the
/// quiet time. A live instance's claims stay as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_a_dead_instance_are_put_in_doubt_and_a_live_ones_are_not() {
    let db = Db::new().await;
    let held = db.job(-1_000, 5).await;
    let claim = db
        .store
        .job_claim_many(&[held], 7, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(claim.won.len(), 1);
    let ttl = Duration::from_millis(500);
    let quiet = Duration::from_millis(300);
    assert_eq!(
        db.store.job_rescue_dead(ttl, quiet, 100).await.unwrap(),
        0,
        "the instance beat its heart a moment ago"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(db.store.job_rescue_dead(ttl, quiet, 100).await.unwrap(), 1);
    let job = db.store.job_get(held).await.unwrap();
    assert_eq!(
        (job.status, job.attempt),
        (Status::Dispatching, 1),
        "in doubt: still dispatching, same attempt"
    );
    assert!(job.last_error.unwrap().contains("which died"));
    assert!(
        matches!(
            db.store.job_cancel(held).await.unwrap(),
            Cancelled::InFlight(_)
        ),
        "a cancel cannot say cancelled while the record may be on the broker"
    );
    assert!(
        db.store.job_doubts_due(100).await.unwrap().is_empty(),
        "not read back before the quiet time"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let doubts = db.store.job_doubts_due(100).await.unwrap();
    assert_eq!(doubts.len(), 1);
    assert_eq!(
        (doubts[0].id, doubts[0].attempt, doubts[0].token),
        (held, 1, Some(7))
    );
    assert!(doubts[0].since <= Utc::now());
    // Not found on Kafka: back to pending, once.
    let moved = db.store.job_doubt_absent(&doubts).await.unwrap();
    assert_eq!(moved.iter().map(|e| e.id).collect::<Vec<_>>(), [held]);
    assert!(db.store.job_doubt_absent(&doubts).await.unwrap().is_empty());
    assert_eq!(
        db.store.job_get(held).await.unwrap().status,
        Status::Pending
    );
    // The dead instance's late mark finds nothing to mark.
    let marked = db
        .store
        .job_mark_dispatched_many(&[Dispatched {
            id: held,
            token: 7,
            partition: 0,
            offset: 1,
            dispatched_at: Utc::now(),
            schedule_time: Utc::now(),
            attempt: 1,
        }])
        .await
        .unwrap();
    assert_eq!(marked.marked, 0);
    db.finish().await;
}

/// A dead instance is judged, and its claims timed in doubt, by its own
/// settings and last heartbeat (its row's `ttl_ms`, `quiet_ms` and
/// `heartbeat_at`), not the rescuer's settings nor the moment it is found
/// dead: during
/// a rolling change of them an instance still trusting its heartbeat is
/// never taken for dead, and its claims are not read back before its own
/// producer has given up on their records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_instance_is_judged_and_its_doubts_timed_by_its_own_settings() {
    let db = Db::new().await;
    let slow = db
        .store
        .instance_register(&InstanceInfo {
            ttl: Some(Duration::from_secs(30)),
            quiet: Some(Duration::from_secs(20)),
            ..info("host-slow", 31)
        })
        .await
        .unwrap();
    let fence = Fence {
        instance: slow,
        ..db.fence.clone()
    };
    for (shard, epoch) in &db.fence.leases {
        assert!(db
            .store
            .shard_acquire(*shard, *epoch, slow)
            .await
            .unwrap()
            .is_some());
    }
    let fence = Fence {
        leases: db
            .fence
            .leases
            .iter()
            .map(|(shard, epoch)| (*shard, epoch + 1))
            .collect(),
        ..fence
    };
    let held = db.job(-1_000, 5).await;
    let won = db
        .store
        .job_claim_many(&[held], 9, LEASE, &fence)
        .await
        .unwrap();
    assert_eq!(won.won.len(), 1);
    // Silent for 10 s: dead by a rescuer's 1 s, alive by its own 30 s.
    db.edit(
        "UPDATE instances SET heartbeat_at = UTC_TIMESTAMP(3) - INTERVAL 10 SECOND WHERE id = ?",
        slow,
    )
    .await;
    let rescuer_ttl = Duration::from_secs(1);
    let rescuer_quiet = Duration::from_millis(100);
    assert_eq!(
        db.store
            .job_rescue_dead(rescuer_ttl, rescuer_quiet, 100)
            .await
            .unwrap(),
        0,
        "alive by its own TTL"
    );
    assert!(
        db.store
            .instances_list(rescuer_ttl)
            .await
            .unwrap()
            .iter()
            .any(|i| i.id == slow && i.live),
        "listed alive by its own TTL"
    );
    // Silent for 35 s: dead. It handed nothing to its producer after three
    // quarters of its TTL past its last beat (22.5 s), and its producer
    // gave up 20 s after that: in doubt until 7.5 s from now, not 100 ms.
    db.edit(
        "UPDATE instances SET heartbeat_at = UTC_TIMESTAMP(3) - INTERVAL 35 SECOND WHERE id = ?",
        slow,
    )
    .await;
    assert_eq!(
        db.store
            .job_rescue_dead(rescuer_ttl, rescuer_quiet, 100)
            .await
            .unwrap(),
        1
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        db.store.job_doubts_due(100).await.unwrap().is_empty(),
        "not read back before its own producer gave up"
    );
    let quiet_left_ms: i64 = sqlx::query_scalar(
        "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(3), claim_expires_at) DIV 1000 FROM jobs WHERE id = ?",
    )
    .bind(held)
    .fetch_one(&db.sql)
    .await
    .unwrap();
    assert!((6_500..=7_500).contains(&quiet_left_ms), "{quiet_left_ms}");
    db.finish().await;
}

/// An instance whose process is known to have exited (its pid gone from
/// its host) holds nothing in a producer any more: its claims are in doubt
/// only for the margin given, and another instance's claims are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claims_of_an_instance_whose_process_exited_wait_only_the_margin() {
    let db = Db::new().await;
    let held = db.job(-1_000, 5).await;
    let other = db.job(-1_000, 5).await;
    let won = db
        .store
        .job_claim_many(&[held, other], 11, LEASE, &db.fence)
        .await
        .unwrap();
    assert_eq!(won.won.len(), 2);
    db.edit(
        "UPDATE jobs SET claimed_by = claimed_by + 1000 WHERE id = ?",
        other,
    )
    .await;
    let margin = Duration::from_millis(400);
    assert_eq!(
        db.store
            .job_rescue_exited(db.fence.instance, margin, 100)
            .await
            .unwrap(),
        1
    );
    let job = db.store.job_get(held).await.unwrap();
    assert_eq!(job.status, Status::Dispatching, "in doubt");
    assert!(job.last_error.unwrap().contains("process exited"));
    assert!(db.store.job_doubts_due(100).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let due: Vec<u64> = db
        .store
        .job_doubts_due(100)
        .await
        .unwrap()
        .iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(
        due,
        [held],
        "read back after the margin; the other claim untouched"
    );
    db.finish().await;
}

/// Dead means silent past the TTL or without a row at all; each claim is
/// put in doubt once, at most `limit` a time, and keeps its lease when
/// that ends before the quiet time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescue_takes_the_claims_of_silent_and_vanished_instances_once_each() {
    let db = Db::new().await;
    let silent = db.fence.instance;
    let vanished = db
        .store
        .instance_register(&info("host-v", 21))
        .await
        .unwrap();
    let alive = db
        .store
        .instance_register(&info("host-l", 22))
        .await
        .unwrap();
    let mut jobs: Vec<JobId> = Vec::new();
    for _ in 0..5 {
        jobs.push(db.job(-1_000, 5).await);
    }
    db.store
        .job_claim_many(&jobs[..4], 3, LEASE, &db.fence)
        .await
        .unwrap();
    let claimed_by = |id: JobId, instance: u64| {
        let sql = db.sql.clone();
        async move {
            sqlx::query("UPDATE jobs SET claimed_by = ? WHERE id = ?")
                .bind(instance)
                .bind(id)
                .execute(&sql)
                .await
                .unwrap();
        }
    };
    claimed_by(jobs[2], vanished).await;
    claimed_by(jobs[3], alive).await;
    // jobs[4]: dispatching by hand, nobody's claim.
    db.edit(
        "UPDATE jobs SET status = 'dispatching' WHERE id = ?",
        jobs[4],
    )
    .await;
    db.edit(
        "UPDATE instances SET heartbeat_at = UTC_TIMESTAMP(3) - INTERVAL 10 MINUTE WHERE id = ?",
        silent,
    )
    .await;
    assert!(db
        .store
        .instance_forget(vanished, "host-v", 21)
        .await
        .unwrap());

    let quiet = Duration::from_secs(3_600);
    assert_eq!(
        db.store.job_rescue_dead(MINUTE, quiet, 2).await.unwrap(),
        2,
        "at most the limit"
    );
    assert_eq!(
        db.store.job_rescue_dead(MINUTE, quiet, 100).await.unwrap(),
        1
    );
    assert_eq!(
        db.store.job_rescue_dead(MINUTE, quiet, 100).await.unwrap(),
        0,
        "once each"
    );

    for (id, instance) in [(jobs[0], silent), (jobs[1], silent), (jobs[2], vanished)] {
        let job = db.store.job_get(id).await.unwrap();
        assert_eq!(job.status, Status::Dispatching);
        assert_eq!(
            job.last_error.unwrap(),
            format!(
                "claimed by instance {instance}, which died; its topic is read back before the job is produced again"
            )
        );
    }
    let (by, error): (Option<u64>, Option<String>) =
        sqlx::query_as("SELECT claimed_by, CAST(last_error AS CHAR) FROM jobs WHERE id = ?")
            .bind(jobs[3])
            .fetch_one(&db.sql)
            .await
            .unwrap();
    assert_eq!(
        (by, error),
        (Some(alive), None),
        "a live instance's claim stays"
    );
    assert_eq!(db.store.job_get(jobs[4]).await.unwrap().last_error, None);
    let due: Vec<JobId> = db
        .store
        .job_doubts_due(100)
        .await
        .unwrap()
        .iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(
        due,
        [jobs[4]],
        "the rescued wait out their lease (shorter than the quiet time) before the read-back"
    );
    db.finish().await;
}
