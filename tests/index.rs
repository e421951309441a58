//! The Lua scripts, through the index module, against a real Redis: claim
//! takes only what is due and holds it under a lease; an expired lease
//! returns ids; requeue and remove move them as documented.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use tickler::index::{Index, Location};
use tickler_testkit::{redis_url, unique};

async fn index_with_one_shard() -> Index {
    Index::connect(&redis_url(), &unique("tickler-t-"), 1)
        .await
        .expect("redis is running (scripts/services)")
}

fn at_ms(ms: i64) -> chrono::DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).unwrap()
}

#[tokio::test]
async fn keys_of_a_shard_share_one_hash_tag() {
    let index = index_with_one_shard().await;
    let due = index.due_key(0);
    let inflight = index.inflight_key(0);
    let tag = |key: &str| key[..=key.find('}').unwrap()].to_owned();
    assert!(due.starts_with('{') && due.ends_with(":due"), "{due}");
    assert_eq!(tag(&due), tag(&inflight));
}

#[tokio::test]
async fn claim_takes_only_due_ids_in_time_order_and_leases_them() {
    let index = index_with_one_shard().await;
    let now_ms = Utc::now().timestamp_millis();
    index
        .job_add_many(&[
            (3, at_ms(now_ms - 1_000)),
            (1, at_ms(now_ms - 3_000)),
            (2, at_ms(now_ms - 2_000)),
            (4, at_ms(now_ms + 3_600_000)),
        ])
        .await
        .unwrap();

    let first = index
        .job_claim(0, 2, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(first.ids, vec![1, 2], "oldest first, at most the limit");
    assert!(
        (first.now_ms - now_ms).abs() < 5_000,
        "redis clock reported"
    );
    assert_eq!(
        first.next_at_ms,
        Some(now_ms - 1_000),
        "next attention: the due job left"
    );
    let claim = index
        .job_claim(0, 10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(claim.ids, vec![3], "the future job is not taken");
    assert_eq!(
        claim.next_at_ms,
        Some(first.now_ms + 30_000),
        "next attention: the first lease to expire, before the future job"
    );

    match index.job_locate(1).await.unwrap() {
        Some(Location::InFlight(expiry)) => {
            assert!(expiry >= claim.now_ms + 29_000, "leased for 30 s: {expiry}")
        }
        other => panic!("claimed id is in flight, got {other:?}"),
    }
    assert_eq!(
        index.job_locate(4).await.unwrap(),
        Some(Location::Due(now_ms + 3_600_000))
    );
    assert_eq!(index.len().await.unwrap(), (1, 3));
}

#[tokio::test]
async fn an_expired_lease_returns_the_id_to_the_next_claim() {
    let index = index_with_one_shard().await;
    index.job_add_many(&[(7, at_ms(1_000))]).await.unwrap();
    let first = index
        .job_claim(0, 10, Duration::from_millis(1), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(first.ids, vec![7]);

    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = index
        .job_claim(0, 10, Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(second.requeued, 1, "the expired lease came back");
    assert_eq!(
        second.ids,
        vec![7],
        "the dead dispatcher's id is claimed again"
    );

    // A live lease protects the id: nothing more to claim.
    let third = index
        .job_claim(0, 10, Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!((third.requeued, third.ids.len()), (0, 0));
}

#[tokio::test]
async fn requeue_and_remove_move_ids_between_the_sets() {
    let index = index_with_one_shard().await;
    index
        .job_add_many(&[(1, at_ms(1_000)), (2, at_ms(1_000)), (3, at_ms(1_000))])
        .await
        .unwrap();
    let claim = index
        .job_claim(0, 10, Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(claim.ids, vec![1, 2, 3]);

    index.job_requeue_many(&[(1, 5_000)]).await.unwrap();
    assert_eq!(
        index.job_locate(1).await.unwrap(),
        Some(Location::Due(5_000))
    );

    let removed = index.job_remove_many(&[1, 2, 99]).await.unwrap();
    assert_eq!(removed, 2, "1 from due, 2 from in-flight, 99 nowhere");
    assert_eq!(index.job_locate(1).await.unwrap(), None);
    assert_eq!(index.job_locate(2).await.unwrap(), None);
    assert!(matches!(
        index.job_locate(3).await.unwrap(),
        Some(Location::InFlight(_))
    ));
}

#[tokio::test]
async fn ids_spread_over_shards_by_their_hash() {
    let index = Index::connect(&redis_url(), &unique("tickler-t-"), 8)
        .await
        .unwrap();
    let jobs: Vec<_> = (1..=64).map(|id| (id, at_ms(1_000))).collect();
    index.job_add_many(&jobs).await.unwrap();
    let mut claimed = Vec::new();
    let mut used = 0;
    for shard in 0..8 {
        let claim = index
            .job_claim(shard, 100, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        if !claim.ids.is_empty() {
            used += 1;
        }
        for id in &claim.ids {
            assert_eq!(index.shard_of(*id), shard);
        }
        claimed.extend(claim.ids);
    }
    claimed.sort();
    assert_eq!(claimed, (1..=64).collect::<Vec<_>>());
    assert!(used >= 6, "64 ids use most of 8 shards, used {used}");
}

#[tokio::test]
async fn refeed_adds_only_ids_the_index_lost() {
    let index = index_with_one_shard().await;
    index
        .job_add_many(&[(1, at_ms(1_000)), (2, at_ms(1_000))])
        .await
        .unwrap();
    let claim = index
        .job_claim(0, 1, Duration::from_secs(60), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(claim.ids, vec![1]);

    let added = index
        .job_refeed_many(&[(1, at_ms(1_000)), (2, at_ms(1_000)), (3, at_ms(2_000))])
        .await
        .unwrap();
    assert_eq!(added, 1, "1 is in flight, 2 is due: only 3 was lost");
    assert!(matches!(
        index.job_locate(1).await.unwrap(),
        Some(Location::InFlight(_))
    ));
    assert_eq!(
        index.job_locate(3).await.unwrap(),
        Some(Location::Due(2_000))
    );
}

#[tokio::test]
async fn sentinels_tell_a_lost_index_from_an_intact_one() {
    let index = index_with_one_shard().await;
    assert!(!index.intact().await.unwrap(), "a new redis is not intact");
    index.mark_intact().await.unwrap();
    assert!(index.intact().await.unwrap());
}

/// A claim with a lookahead takes the ids due within it (by Redis's clock)
/// and leaves later ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_with_a_lookahead_takes_what_is_due_within_it() {
    let index = index_with_one_shard().await;
    let now_ms = Utc::now().timestamp_millis();
    index
        .job_add_many(&[(1, at_ms(now_ms + 500)), (2, at_ms(now_ms + 60_000))])
        .await
        .unwrap();
    let claim = index
        .job_claim(0, 10, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    assert!(claim.ids.is_empty(), "nothing due yet");
    let claim = index
        .job_claim(0, 10, Duration::from_secs(30), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(claim.ids, vec![1], "due within the lookahead");
    assert_eq!(
        claim.next_at_ms,
        Some(claim.now_ms + 30_000),
        "next attention: the lease, before the later job"
    );
}

/// A pending job due at `at`, as MySQL has just created it.
fn job_created(id: u64, at: chrono::DateTime<Utc>) -> tickler::domain::job::Job {
    tickler::domain::job::Job {
        id,
        topic: "t".to_owned(),
        key: None,
        payload: Vec::new(),
        payload_kind: tickler::domain::job::PayloadKind::Bytes,
        headers: Default::default(),
        schedule_time: at,
        status: tickler::domain::job::Status::Pending,
        attempt: 0,
        policy: tickler::domain::policy::Policy::default(),
        version: 1,
        created_at: at,
        updated_at: at,
        dispatched_at: None,
        kafka_partition: None,
        kafka_offset: None,
        verified_at: None,
        last_error: None,
        ack_deadline: None,
        trace_parent: None,
        schedule_id: None,
        expires_at: None,
        window_ms: None,
        window_start: None,
        wall: None,
        debounce_until: None,
        generation: 0,
        previous_id: None,
        held_at: None,
        held_reason: None,
        schema_waived_attempt: None,
    }
}

#[tokio::test]
async fn jobs_just_created_are_indexed_when_due_within_the_window_and_only_then() {
    use futures::FutureExt;
    let index = index_with_one_shard().await;
    let wake = tokio::sync::Notify::new();
    let window = Duration::from_secs(60);
    let now = at_ms(1_000_000);
    // An entry under the far job's id. None can be there in life (a job
    // just created has a new id); here it shows that no removal is sent
    // for a job due after the window: a Redis call per create, for nothing.
    index.job_add_many(&[(2, at_ms(5_000))]).await.unwrap();
    let near = job_created(1, at_ms(1_030_000));
    let far = job_created(2, at_ms(1_000_000 + 61_000));
    tickler::index::follow_created(&index, window, &wake, &[&near, &far], now).await;
    let (mut due, inflight) = index.members().await.unwrap();
    due.sort();
    assert_eq!(due, vec![(1, 1_030_000), (2, 5_000)]);
    assert!(inflight.is_empty());
    // The dispatcher is woken for the job indexed: notify_one left a permit.
    assert!(wake.notified().now_or_never().is_some());

    // Only jobs due after the window: nothing indexed, nobody woken.
    let later = job_created(3, at_ms(1_000_000 + 3_600_000));
    tickler::index::follow_created(&index, window, &wake, &[&later], now).await;
    assert_eq!(index.members().await.unwrap().0.len(), 2);
    assert!(wake.notified().now_or_never().is_none());
}
