//! tickler on a Redis Cluster: each test starts its own three masters (no
//! replicas, no persistence). The index's scripts run with the cluster
//! client, every shard's keys in one slot; the dispatcher runs on it; and a
//! master restarted empty loses no job.

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use chrono::Utc;
use tickler::index::{Index, Location, RedisClient};
use tickler_testkit::chronos::{check, Services, World};
use tickler_testkit::procs::PrivateRedisCluster;
use tickler_testkit::unique;

fn index_on(cluster: &PrivateRedisCluster, shards: u32) -> Index {
    let client = redis::cluster::ClusterClient::new(cluster.urls().split(',')).unwrap();
    Index::connect_with(RedisClient::Cluster(client), &unique("tickler-t-"), shards).unwrap()
}

fn keys_on(port: u16) -> u64 {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "dbsize"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_index_script_runs_on_a_cluster_with_the_shards_spread_over_the_masters() {
    let cluster = PrivateRedisCluster::start().await;
    let index = index_on(&cluster, 16);
    assert!(index.is_cluster());
    assert!(!index.intact().await.unwrap(), "a brand-new cluster");
    index.mark_intact().await.unwrap();
    assert!(index.intact().await.unwrap());

    let past = Utc::now() - chrono::Duration::seconds(1);
    let ids: Vec<u64> = (1..=200).collect();
    let entries: Vec<(u64, chrono::DateTime<Utc>)> = ids.iter().map(|id| (*id, past)).collect();
    index.job_add_many(&entries).await.unwrap();
    assert_eq!(index.len().await.unwrap(), (200, 0));
    for port in &cluster.ports {
        assert!(
            keys_on(*port) > 0,
            "every master holds shards (port {port})"
        );
    }

    // Claim every shard: all 200, each from its own shard's keys.
    let mut claimed = Vec::new();
    for shard in 0..16 {
        let claim = index
            .job_claim(shard, 100, Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap();
        assert!(claim.ids.iter().all(|id| index.shard_of(*id) == shard));
        claimed.extend(claim.ids);
    }
    claimed.sort_unstable();
    assert_eq!(claimed, ids);
    assert_eq!(index.len().await.unwrap(), (0, 200));

    // Requeue some, remove some, adopt a shard, refeed: each moves its ids.
    let later_ms = Utc::now().timestamp_millis() + 60_000;
    index
        .job_requeue_many(&[(1, later_ms), (2, later_ms)])
        .await
        .unwrap();
    assert_eq!(
        index.job_locate(1).await.unwrap(),
        Some(Location::Due(later_ms))
    );
    assert_eq!(index.job_remove_many(&[3, 4]).await.unwrap(), 2);
    assert_eq!(index.job_locate(3).await.unwrap(), None);
    let shard = index.shard_of(5);
    let moved = index.shard_adopt(shard).await.unwrap();
    assert!(moved >= 1);
    assert!(matches!(
        index.job_locate(5).await.unwrap(),
        Some(Location::Due(_))
    ));
    assert_eq!(
        index
            .job_refeed_many(&[(3, past), (5, past)])
            .await
            .unwrap(),
        1,
        "3 was gone and comes back; 5 was there"
    );
    assert!(index.clear().await.unwrap() > 0);
    assert_eq!(index.len().await.unwrap(), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickler_on_a_cluster_loses_nothing_when_a_master_restarts_empty() {
    let mut cluster = PrivateRedisCluster::start().await;
    let services = Services {
        redis_url: cluster.urls(),
        ..Services::shared()
    };
    let world = World::start(services, &[]).await;
    let t0 = Utc::now() + chrono::Duration::seconds(3);
    let expected = world.jobs_schedule(1500, t0, Duration::from_secs(8)).await;
    tokio::time::sleep_until(
        tokio::time::Instant::now()
            + (t0 - Utc::now()).to_std().unwrap_or_default()
            + Duration::from_secs(3),
    )
    .await;
    // Its slots' keys go, the sentinels with them: the loader re-indexes.
    cluster.restart(1).await;
    let ids: HashSet<u64> = expected.iter().map(|e| e.id).collect();
    world.await_seen(&ids, Duration::from_secs(60)).await;
    let verdict = check(
        &expected,
        &HashSet::new(),
        &world.interrupted().await,
        &world.seen_audited().await,
    );
    verdict.assert_clean("a cluster master restarted empty");
    world.finish().await;
}
