//! Membership rounds, driven one at a time against a real database and
//! Redis: shards spread over the live dispatchers, a silent instance's
//! shards and claims are taken over once its TTL passes, and a leaving
//! instance frees its shards at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tickler::config::Config;
use tickler::domain::job::{NewJob, PayloadKind, Schedule};
use tickler::domain::policy::Policy;
use tickler::index::Index;
use tickler::roles::membership::{Membership, MembershipConfig};
use tickler::store::{Actor, Store};
use tickler_testkit::{database_create, database_drop, redis_url, test_config, unique};

const TTL: Duration = Duration::from_millis(600);

struct Deployment {
    db_name: String,
    store: Store,
    index: Index,
    config: Config,
}

impl Deployment {
    async fn new(shards: u32) -> Deployment {
        let (db_name, url) = database_create().await;
        let mut config = test_config(&url, &unique("tickler-t-"));
        config.cluster.shards = shards;
        config.cluster.instance_ttl_ms = TTL.as_millis() as u64;
        let store = Store::connect_lazy(&url, 4, Actor::Reconciler).unwrap();
        let index = Index::connect(&redis_url(), &config.redis.prefix, shards)
            .await
            .unwrap();
        Deployment {
            db_name,
            store,
            index,
            config,
        }
    }

    /// A member whose process is `pid` in the pid namespace `namespace`
    /// (None: this process's), on this host.
    fn member_as(&self, pid: u32, namespace: Option<&str>) -> Membership {
        let mut config = MembershipConfig {
            dispatcher: true,
            doubt_quiet: Duration::from_millis(100),
            ..MembershipConfig::from_config(&self.config)
        };
        config.info.pid = pid;
        if let Some(namespace) = namespace {
            config.info.pid_namespace = Some(namespace.to_owned());
        }
        Membership::new(
            self.store.clone(),
            self.index.clone(),
            config,
            Arc::new(tokio::sync::Notify::new()),
        )
    }

    fn member(&self) -> Membership {
        Membership::new(
            self.store.clone(),
            self.index.clone(),
            MembershipConfig {
                dispatcher: true,
                // The quiet time of a dead instance's claims: short, so the
                // tests settle them at once.
                doubt_quiet: Duration::from_millis(100),
                ..MembershipConfig::from_config(&self.config)
            },
            Arc::new(tokio::sync::Notify::new()),
        )
    }

    async fn finish(self) {
        self.store.close().await;
        database_drop(&self.db_name).await;
    }
}

/// A pending job due a second ago.
async fn job_due(store: &Store) -> u64 {
    let job = NewJob {
        topic: "membership-test".to_owned(),
        key: None,
        payload: b"{}".to_vec(),
        payload_kind: PayloadKind::Json,
        headers: BTreeMap::new(),
        schedule: Schedule::At(chrono::Utc::now() - chrono::Duration::seconds(1)),
        policy: Policy::default(),
        trace_parent: None,
        schedule_id: None,
        expires_at: None,
        expires_after_ms: None,
        window: None,
        wall: None,
    };
    store.job_insert(&job).await.unwrap().0.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_spread_over_the_live_and_a_silent_instances_go_to_the_others() {
    let deployment = Deployment::new(16).await;
    let members = [deployment.member(), deployment.member()];
    let ids = [
        members[0].join().await.unwrap(),
        members[1].join().await.unwrap(),
    ];
    // Two rounds each: in its first, one may find the other above its share.
    for _ in 0..2 {
        for (member, id) in members.iter().zip(ids) {
            member.run_once(id, false).await.unwrap();
        }
    }
    let reports = [
        members[0].run_once(ids[0], false).await.unwrap(),
        members[1].run_once(ids[1], false).await.unwrap(),
    ];
    assert_eq!(
        (reports[0].live, reports[0].held, reports[1].held),
        (2, 8, 8),
        "{reports:?}"
    );

    // Whoever holds the job's shard claims it, then goes silent (no more
    // rounds) past its TTL.
    let job = job_due(&deployment.store).await;
    let shard = deployment.index.shard_of(job);
    let silent = usize::from(members[0].subscribe().borrow().fence([shard]).is_none());
    let survivor = 1 - silent;
    let before = members[survivor].subscribe().borrow().shards.clone();
    let fence = members[silent]
        .subscribe()
        .borrow()
        .fence([shard])
        .expect("one of them holds the shard");
    let claim = deployment
        .store
        .job_claim_many(&[job], 1, Duration::from_secs(30), &fence)
        .await
        .unwrap();
    assert_eq!(claim.won.len(), 1);
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    let report = members[survivor]
        .run_once(ids[survivor], false)
        .await
        .unwrap();
    assert_eq!(
        (report.live, report.held, report.rescued),
        (1, 16, 1),
        "the survivor takes every shard and puts the claim in doubt: {report:?}"
    );
    // In doubt (its record may be on the broker) until read back; here
    // none is, and it is pending again with the same attempt.
    let in_doubt = deployment.store.job_get(job).await.unwrap();
    assert_eq!(in_doubt.status.as_str(), "dispatching");
    assert!(in_doubt.last_error.unwrap().contains("which died"));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let doubts = deployment.store.job_doubts_due(10).await.unwrap();
    assert_eq!(
        deployment
            .store
            .job_doubt_absent(&doubts)
            .await
            .unwrap()
            .len(),
        1
    );
    let job = deployment.store.job_get(job).await.unwrap();
    assert_eq!((job.status.as_str(), job.attempt), ("pending", 1));
    // The shards it took have a new epoch: the silent one's fence is stale.
    let after = members[survivor].subscribe().borrow().shards.clone();
    assert!(after[&shard] > fence.leases[0].1);
    for (shard, epoch) in &before {
        assert_eq!(after[shard], *epoch, "its own shards keep their epoch");
    }
    let stale = deployment
        .store
        .job_claim_many(&[job.id], 2, Duration::from_secs(30), &fence)
        .await
        .unwrap();
    assert_eq!(stale.fenced, [job.id], "the silent one wins nothing now");
    deployment.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_cut_off_itself_takes_only_free_shards_and_rescues_nothing() {
    let deployment = Deployment::new(4).await;
    let (a, b) = (deployment.member(), deployment.member());
    let (id_a, id_b) = (a.join().await.unwrap(), b.join().await.unwrap());
    for _ in 0..2 {
        a.run_once(id_a, false).await.unwrap();
        b.run_once(id_b, false).await.unwrap();
    }
    // Both silent past the TTL (the database was unreachable, say); a comes
    // back first, but in its first round judges nobody.
    tokio::time::sleep(TTL + Duration::from_millis(200)).await;
    let first = a.run_once(id_a, true).await.unwrap();
    assert_eq!(first.held, 2, "keeps its own, takes none of b's: {first:?}");
    b.run_once(id_b, false).await.unwrap();
    let report = b.run_once(id_b, false).await.unwrap();
    assert_eq!(report.held, 2, "b keeps its share: {report:?}");
    deployment.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_instance_frees_its_shards_at_once() {
    let deployment = Deployment::new(8).await;
    let (a, b) = (deployment.member(), deployment.member());
    let (id_a, id_b) = (a.join().await.unwrap(), b.join().await.unwrap());
    for _ in 0..2 {
        a.run_once(id_a, false).await.unwrap();
        b.run_once(id_b, false).await.unwrap();
    }
    deployment.store.instance_leave(id_b).await.unwrap();
    // No wait for the TTL.
    let report = a.run_once(id_a, false).await.unwrap();
    assert_eq!((report.live, report.held), (1, 8), "{report:?}");
    deployment.finish().await;
}

/// After kill -9 and a restart on the same host, the new process sees that
/// its predecessor — same host, same pid namespace, its pid gone — is dead,
/// and takes its shards in its first round instead of after
/// `cluster.instance_ttl_ms`. A process of another pid namespace (a container
/// sharing the hostname) is never judged so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_the_same_host_takes_over_its_dead_predecessor_at_once() {
    let deployment = Deployment::new(8).await;
    // No process has this pid.
    const GONE: u32 = 4_000_000_000;
    let predecessor = deployment.member_as(GONE, None);
    let before = predecessor.join().await.unwrap();
    assert_eq!(predecessor.run_once(before, false).await.unwrap().held, 8);
    let elsewhere = deployment.member_as(GONE - 1, Some("pid:[1]"));
    let other = elsewhere.join().await.unwrap();
    elsewhere.run_once(other, false).await.unwrap();

    let successor = deployment.member();
    let id = successor.join().await.unwrap();
    let report = successor.run_once(id, false).await.unwrap();
    assert_eq!(
        (report.live, report.held),
        (2, 4),
        "at once, the predecessor's shards shared with the other live one: {report:?}"
    );
    let rows = deployment
        .store
        .instances_list(Duration::from_secs(60))
        .await
        .unwrap();
    let ids: Vec<u64> = rows.iter().map(|r| r.id).collect();
    assert!(!ids.contains(&before), "the predecessor's row is gone");
    assert!(
        ids.contains(&other),
        "another namespace's instance is left alone"
    );
    deployment.finish().await;
}

/// An instance whose row was deleted (taken for dead: its claims may be in
/// doubt) becomes a new incarnation when a heartbeat puts the row back: it
/// sends nothing it claimed before, and what it claims from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_row_was_gone_sends_nothing_it_claimed_before() {
    let deployment = Deployment::new(4).await;
    let member = deployment.member();
    let ownership = member.subscribe();
    let id = member.join().await.unwrap();
    member.run_once(id, false).await.unwrap();
    let now = || tokio::time::Instant::now();
    let before = ownership.borrow().incarnation;
    assert!(ownership.borrow().may_send(before, now()));
    // Someone took it for dead and deleted its row.
    deployment
        .store
        .instance_forget(
            id,
            &MembershipConfig::from_config(&deployment.config).info.host,
            std::process::id(),
        )
        .await
        .unwrap();
    member.run_once(id, false).await.unwrap();
    let after = ownership.borrow().incarnation;
    assert_ne!(after, before, "a new incarnation");
    assert!(
        !ownership.borrow().may_send(before, now()),
        "withholds what it claimed before: those claims may be in doubt"
    );
    assert!(
        ownership.borrow().may_send(after, now()),
        "its row is back: it sends what it claims now"
    );
    member.run_once(id, false).await.unwrap();
    assert_eq!(
        ownership.borrow().incarnation,
        after,
        "one lapse, one incarnation"
    );
    deployment.finish().await;
}

/// A round's Redis work (adopting the shards it takes) against a Redis that
/// hangs takes the response timeout per call, many seconds in all: the
/// instance beats on all the while, so the others never take it for dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_slowed_by_redis_does_not_age_the_heartbeat() {
    let redis = tickler_testkit::procs::PrivateRedis::start().await;
    let (db_name, url) = database_create().await;
    let mut config = test_config(&url, &unique("tickler-t-"));
    config.cluster.shards = 8;
    config.cluster.instance_ttl_ms = 2_000;
    let store = Store::connect_lazy(&url, 4, Actor::Reconciler).unwrap();
    let index = Index::connect(&redis.url(), &config.redis.prefix, 8)
        .await
        .unwrap();
    let member = Membership::new(
        store.clone(),
        index,
        MembershipConfig {
            dispatcher: true,
            ..MembershipConfig::from_config(&config)
        },
        Arc::new(tokio::sync::Notify::new()),
    );
    // Redis stops answering before the first round, which takes all eight
    // shards and adopts each (a 2 s response timeout apiece).
    redis.proc.pause();
    let cancel = tokio_util::sync::CancellationToken::new();
    let done = tokio_util::sync::CancellationToken::new();
    done.cancel();
    let running = tokio::spawn(member.run(cancel.clone(), done));
    let sql = sqlx::MySqlPool::connect(&url).await.unwrap();
    let mut ages = Vec::new();
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let age: Option<i64> = sqlx::query_scalar(
            "SELECT TIMESTAMPDIFF(MICROSECOND, MAX(heartbeat_at), UTC_TIMESTAMP(3)) DIV 1000 FROM instances",
        )
        .fetch_one(&sql)
        .await
        .unwrap();
        ages.push(age);
    }
    redis.proc.resume();
    cancel.cancel();
    let _ = running.await;
    assert!(
        ages[1..].iter().all(|age| age.is_some_and(|ms| ms < 2_000)),
        "the heartbeat stays within the TTL (2 s) while the round waits on Redis (ms): {ages:?}"
    );
    store.close().await;
    database_drop(&db_name).await;
}
