//! Topic-level limits (#60): a topic's `default_ttl_ms` is inherited by the
//! jobs created on it that give no expiry of their own, so that what an
//! outage held back past it ends `expired` instead of going out late; a
//! job's own expiry wins, and other topics are untouched.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use tickler::config::{OverduePolicy, TopicConfig};
use tickler_testkit::{consumer_from_beginning, eventually, records_read, unique, TestEnv};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_late_past_their_topics_default_ttl_expire_instead_of_going_out() {
    let limited = unique("tickler-test-ttl-");
    tickler::kafka::topic_ensure(&tickler_testkit::kafka_brokers(), &limited, 1)
        .await
        .unwrap();
    let configured = limited.clone();
    let env = TestEnv::start_with(move |c| {
        c.topics.insert(
            configured,
            TopicConfig {
                default_ttl_ms: Some(60_000),
                ..TopicConfig::default()
            },
        );
    })
    .await;
    // Held back five minutes (an outage), then created: due at once.
    let late = (Utc::now() - chrono::Duration::minutes(5)).to_rfc3339();
    let create = |topic: &str, key: &str, extra: serde_json::Value| {
        let mut body = json!({"topic": topic, "key": key, "payload": key, "run_at": late});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let inherited = env
        .job_create(create(&limited, "inherited", json!({})))
        .await;
    assert!(inherited["expires_at"].is_string(), "{inherited}");
    let own = env
        .job_create(create(&limited, "own", json!({"ttl_ms": 3_600_000})))
        .await;
    let other = env.job_create(create(&env.topic, "other", json!({}))).await;
    assert!(other.get("expires_at").is_none(), "{other}");

    let id = |job: &serde_json::Value| job["id"].as_u64().unwrap();
    env.status_await(id(&inherited), "expired", Duration::from_secs(20))
        .await;
    env.status_await(id(&own), "dispatched", Duration::from_secs(20))
        .await;
    env.status_await(id(&other), "dispatched", Duration::from_secs(20))
        .await;
    let consumer = consumer_from_beginning(&env.config.kafka.brokers, &limited);
    let keys: Vec<String> = records_read(&consumer, 2, Duration::from_secs(5))
        .await
        .iter()
        .filter_map(|record| record.key.clone())
        .collect();
    assert_eq!(
        keys,
        vec!["own".to_owned()],
        "the expired job never went out"
    );
    env.finish().await;
}

async fn statuses(env: &TestEnv, topic: &str) -> (i64, i64) {
    let count = |status: &'static str| {
        let sql = env.sql.clone();
        let topic = topic.to_owned();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM jobs WHERE topic = ? AND status = ?")
                .bind(topic)
                .bind(status)
                .fetch_one(&sql)
                .await
                .unwrap()
        }
    };
    (count("dispatched").await, count("succeeded").await)
}

/// A topic's consumers, back from an outage, get at most `max_in_flight`
/// jobs awaiting their result at once; each result makes room for one more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_max_in_flight_lets_out_a_backlog_as_results_come_back() {
    let limited = unique("tickler-test-inflight-");
    tickler::kafka::topic_ensure(&tickler_testkit::kafka_brokers(), &limited, 1)
        .await
        .unwrap();
    let configured = limited.clone();
    let env = TestEnv::start_with(move |c| {
        c.topics.insert(
            configured,
            TopicConfig {
                expects_result: Some(true),
                max_in_flight: Some(3),
                ..TopicConfig::default()
            },
        );
    })
    .await;
    let mut ids = Vec::new();
    for n in 0..10 {
        let job = env
            .job_create(
                json!({"topic": limited, "key": format!("k{n}"), "payload": n, "delay_ms": 0}),
            )
            .await;
        ids.push(job["id"].as_u64().unwrap());
    }
    // Three go out; the rest wait, however long we look.
    eventually(Duration::from_secs(20), || async {
        (statuses(&env, &limited).await == (3, 0)).then_some(())
    })
    .await
    .expect("three in flight");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(statuses(&env, &limited).await, (3, 0), "no more than three");
    // Results come back: each frees room, until all are done.
    let mut done = 0;
    while done < ids.len() {
        let dispatched: Vec<u64> =
            sqlx::query_scalar("SELECT id FROM jobs WHERE topic = ? AND status = 'dispatched'")
                .bind(&limited)
                .fetch_all(&env.sql)
                .await
                .unwrap();
        assert!(dispatched.len() <= 3, "{} in flight", dispatched.len());
        for id in dispatched {
            let (status, answer) = env
                .post(
                    &format!("/v1/jobs/{id}/result"),
                    json!({"attempt": 1, "outcome": "ok"}),
                )
                .await;
            assert_eq!(status, 200, "{answer}");
            done += 1;
        }
        if done < ids.len() {
            let before = done as i64;
            eventually(Duration::from_secs(20), || async {
                let (dispatched, succeeded) = statuses(&env, &limited).await;
                (succeeded == before && dispatched > 0).then_some(())
            })
            .await
            .expect("room made, the next go out");
        }
    }
    assert_eq!(statuses(&env, &limited).await, (0, 10));
    env.finish().await;
}

/// A topic's backlog past `max_overdue` (here held by a pause, as by an
/// outage): with `expire`, the oldest end `expired` and the newest go out
/// once it resumes; with `alert`, nothing ends, the gauge says it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_past_max_overdue_expires_its_oldest_or_raises_the_gauge() {
    let expiring = unique("tickler-test-overdue-");
    let alerting = unique("tickler-test-overdue-alert-");
    for topic in [&expiring, &alerting] {
        tickler::kafka::topic_ensure(&tickler_testkit::kafka_brokers(), topic, 1)
            .await
            .unwrap();
    }
    let (e, a) = (expiring.clone(), alerting.clone());
    let env = TestEnv::start_with(move |c| {
        for (topic, policy) in [(e, OverduePolicy::Expire), (a, OverduePolicy::Alert)] {
            c.topics.insert(
                topic,
                TopicConfig {
                    max_overdue: Some(3),
                    overdue_policy: Some(policy),
                    overdue_after_ms: Some(1_000),
                    ..TopicConfig::default()
                },
            );
        }
    })
    .await;
    for topic in [&expiring, &alerting] {
        let (status, paused) = env
            .post(&format!("/v1/topics/{topic}/pause"), json!({}))
            .await;
        assert_eq!(status, 200, "{paused}");
    }
    // Ten jobs each, due 10 to 1 minutes ago: the outage's backlog.
    let mut expiring_ids = Vec::new();
    for minutes in (1..=10).rev() {
        let run_at = (Utc::now() - chrono::Duration::minutes(minutes)).to_rfc3339();
        for topic in [&expiring, &alerting] {
            let job = env
                .job_create(json!({"topic": topic, "key": format!("m{minutes}"), "payload": minutes, "run_at": run_at}))
                .await;
            if topic == &expiring {
                expiring_ids.push((minutes, job["id"].as_u64().unwrap()));
            }
        }
    }
    let count = |topic: String, status: &'static str| {
        let sql = env.sql.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM jobs WHERE topic = ? AND status = ?")
                .bind(topic)
                .bind(status)
                .fetch_one(&sql)
                .await
                .unwrap()
        }
    };
    eventually(Duration::from_secs(20), || async {
        (count(expiring.clone(), "expired").await == 7).then_some(())
    })
    .await
    .expect("the seven oldest expired");
    for (minutes, id) in &expiring_ids {
        let expected = if *minutes > 3 { "expired" } else { "pending" };
        assert_eq!(env.job_status(*id).await, expected, "due {minutes} min ago");
    }
    let (_, text) = env.metrics_text().await;
    let series = format!("tickler_topic_overdue_capped{{topic=\"{alerting}\"}} ");
    let gauge = text
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.parse::<f64>().ok());
    assert_eq!(gauge, Some(1.0));
    assert_eq!(count(alerting.clone(), "expired").await, 0);
    assert_eq!(count(alerting.clone(), "pending").await, 10);

    // Resumed: the three newest go out, the expired never.
    let (status, _) = env
        .post(&format!("/v1/topics/{expiring}/resume"), json!({}))
        .await;
    assert_eq!(status, 200);
    let consumer = consumer_from_beginning(&env.config.kafka.brokers, &expiring);
    let mut keys: Vec<String> = records_read(&consumer, 4, Duration::from_secs(10))
        .await
        .iter()
        .filter_map(|record| record.key.clone())
        .collect();
    keys.sort();
    assert_eq!(keys, vec!["m1", "m2", "m3"]);
    env.finish().await;
}

/// `overdue_policy = "defer"`: the backlog past the oldest `max_overdue`
/// is moved later in its order, `max_overdue` jobs per `overdue_after_ms`,
/// with a history row each; the oldest go out at once, the deferred later,
/// none ends unsent. A job with a hand-set ancient time moves only itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_past_max_overdue_is_deferred_in_its_order_and_paced() {
    let topic = unique("tickler-test-overdue-defer-");
    tickler::kafka::topic_ensure(&tickler_testkit::kafka_brokers(), &topic, 1)
        .await
        .unwrap();
    let t = topic.clone();
    let env = TestEnv::start_with(move |c| {
        c.topics.insert(
            t,
            TopicConfig {
                max_overdue: Some(3),
                overdue_policy: Some(OverduePolicy::Defer),
                overdue_after_ms: Some(30_000),
                ..TopicConfig::default()
            },
        );
    })
    .await;
    let (status, paused) = env
        .post(&format!("/v1/topics/{topic}/pause"), json!({}))
        .await;
    assert_eq!(status, 200, "{paused}");
    // Ten jobs due 10 to 1 minutes ago; the oldest of them set by hand to
    // the year 1000, as a restore might leave it.
    let mut ids = Vec::new();
    for minutes in (1..=10).rev() {
        let run_at = (Utc::now() - chrono::Duration::minutes(minutes)).to_rfc3339();
        let job = env
            .job_create(json!({"topic": topic, "key": format!("m{minutes}"), "payload": minutes, "run_at": run_at}))
            .await;
        ids.push((minutes, job["id"].as_u64().unwrap()));
    }
    sqlx::query("UPDATE jobs SET schedule_time = '1000-01-01 00:00:00' WHERE id = ?")
        .bind(ids[0].1)
        .execute(&env.sql)
        .await
        .unwrap();
    let deferred = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM jobs WHERE topic = ? AND status = 'pending' \
             AND schedule_time > UTC_TIMESTAMP(3)",
        )
        .bind(&topic)
        .fetch_one(&env.sql)
        .await
        .unwrap()
    };
    eventually(Duration::from_secs(20), || async {
        (deferred().await == 7).then_some(())
    })
    .await
    .expect("the seven newest deferred");
    // In their order, three per 30 s: m7-m5, m4-m2, m1.
    let mut slots: Vec<(i64, chrono::NaiveDateTime)> = Vec::new();
    for (minutes, id) in &ids {
        let at: chrono::NaiveDateTime =
            sqlx::query_scalar("SELECT schedule_time FROM jobs WHERE id = ?")
                .bind(*id)
                .fetch_one(&env.sql)
                .await
                .unwrap();
        slots.push((*minutes, at));
    }
    let now = Utc::now().naive_utc();
    for (minutes, at) in &slots[..3] {
        assert!(*at < now, "m{minutes} stays overdue, first to go: {at}");
    }
    let first = slots[3].1;
    for (minutes, at) in &slots[3..] {
        let slot = (*at - first).num_milliseconds();
        let expected = match minutes {
            5..=7 => 0,
            2..=4 => 30_000,
            _ => 60_000,
        };
        assert_eq!(slot, expected, "m{minutes} at {at}");
    }
    let first_in = (first - now).num_milliseconds();
    // Ahead, and no further than overdue_after_ms from the pass (a bound,
    // not a duration: the pass came before this read).
    assert!(
        (1..=31_000).contains(&first_in),
        "the first slot is overdue_after_ms from the pass: {first_in} ms"
    );
    let moved: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT e.job_id) FROM job_events e JOIN jobs j ON j.id = e.job_id \
         WHERE j.topic = ? AND CAST(e.actor AS CHAR) LIKE 'reconciler%'",
    )
    .bind(&topic)
    .fetch_one(&env.sql)
    .await
    .unwrap();
    assert_eq!(moved, 7, "a history row each, by the reconciler");
    let (_, text) = env.metrics_text().await;
    let series = format!("tickler_topic_overdue_deferred_total{{topic=\"{topic}\"}} ");
    let counted = text
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.parse::<f64>().ok());
    assert_eq!(counted, Some(7.0));

    // Resumed: the three oldest go out now, the deferred at their slots.
    let (status, _) = env
        .post(&format!("/v1/topics/{topic}/resume"), json!({}))
        .await;
    assert_eq!(status, 200);
    let consumer = consumer_from_beginning(&env.config.kafka.brokers, &topic);
    let mut keys: Vec<String> = records_read(&consumer, 4, Duration::from_secs(8))
        .await
        .iter()
        .filter_map(|record| record.key.clone())
        .collect();
    keys.sort();
    assert_eq!(keys, vec!["m10", "m8", "m9"]);
    assert_eq!(deferred().await, 7, "none of the deferred went early");
    env.finish().await;
}

/// `group_max_in_flight`: each tenant (here the key's prefix) gets at
/// most two jobs awaiting their result, within the topic's seven: one
/// tenant's backlog cannot take every slot, and its results make room for
/// its own next jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_group_of_a_topic_is_held_to_its_group_max_in_flight() {
    let topic = unique("tickler-test-inflight-group-");
    tickler::kafka::topic_ensure(&tickler_testkit::kafka_brokers(), &topic, 1)
        .await
        .unwrap();
    let configured = topic.clone();
    let env = TestEnv::start_with(move |c| {
        c.topics.insert(
            configured,
            TopicConfig {
                expects_result: Some(true),
                group_by: Some("key::".to_owned()),
                group_max_in_flight: Some(2),
                max_in_flight: Some(7),
                ..TopicConfig::default()
            },
        );
    })
    .await;
    // A burst of tenant a, then b, c and d behind it.
    let mut keys = Vec::new();
    for n in 0..8 {
        keys.push(format!("a:{n}"));
    }
    for tenant in ["b", "c", "d"] {
        for n in 0..2 {
            keys.push(format!("{tenant}:{n}"));
        }
    }
    for key in &keys {
        env.job_create(json!({"topic": topic, "key": key, "payload": 1, "delay_ms": 0}))
            .await;
    }
    let in_flight = || async {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT SUBSTRING_INDEX(CAST(job_key AS CHAR), ':', 1) AS tenant, COUNT(*) FROM jobs \
             WHERE topic = ? AND status = 'dispatched' GROUP BY tenant ORDER BY tenant",
        )
        .bind(&topic)
        .fetch_all(&env.sql)
        .await
        .unwrap();
        rows
    };
    let full = eventually(Duration::from_secs(20), || async {
        let rows = in_flight().await;
        let total: i64 = rows.iter().map(|(_, n)| n).sum();
        (total == 7).then_some(rows)
    })
    .await
    .expect("the topic's seven in flight");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = in_flight().await;
    assert_eq!(full, settled, "no more went out");
    assert!(
        settled.iter().all(|(_, n)| *n <= 2),
        "at most two of each tenant: {settled:?}"
    );
    assert!(
        settled.iter().any(|(tenant, _)| tenant != "a"),
        "tenant a's burst did not take every slot: {settled:?}"
    );
    // a's results come back: the room goes to a's next jobs, never past two.
    let mut finished = 0;
    while finished < 8 {
        let dispatched: Vec<u64> = sqlx::query_scalar(
            "SELECT id FROM jobs WHERE topic = ? AND status = 'dispatched' AND job_key LIKE 'a:%'",
        )
        .bind(&topic)
        .fetch_all(&env.sql)
        .await
        .unwrap();
        assert!(dispatched.len() <= 2, "{} of a in flight", dispatched.len());
        for id in &dispatched {
            let (status, answer) = env
                .post(
                    &format!("/v1/jobs/{id}/result"),
                    json!({"attempt": 1, "outcome": "ok"}),
                )
                .await;
            assert_eq!(status, 200, "{answer}");
            finished += 1;
        }
        if finished < 8 {
            eventually(Duration::from_secs(20), || async {
                let now: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM jobs WHERE topic = ? AND status = 'dispatched' \
                     AND job_key LIKE 'a:%'",
                )
                .bind(&topic)
                .fetch_one(&env.sql)
                .await
                .unwrap();
                (now > 0).then_some(())
            })
            .await
            .expect("a's next jobs go out");
        }
    }
    let rows = in_flight().await;
    assert!(
        rows.iter().all(|(tenant, n)| tenant != "a" && *n <= 2),
        "{rows:?}"
    );
    env.finish().await;
}

/// The overdue cap's writes are compare-and-sets, not a lock held from
/// reading the backlog to writing it (#62): of the ids read, a row an
/// operator moved out of the backlog meanwhile and one cancelled stay as
/// they are, and only the rows written are named, with their history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overdue_cap_writes_only_the_rows_still_as_it_read_them() {
    use tickler::domain::job::Status;
    use tickler_testkit::store::Db;

    let db = Db::new().await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(db.job(-600_000, 1).await);
    }
    let (kept, moved, cancelled, deferred) = (ids[0], ids[1], ids[2], ids[3]);
    // Read as overdue, then changed before the write.
    db.edit(
        "UPDATE jobs SET schedule_time = TIMESTAMPADD(HOUR, 1, UTC_TIMESTAMP(3)) WHERE id = ?",
        moved,
    )
    .await;
    db.store.job_cancel(cancelled).await.unwrap();

    let expired = db
        .store
        .topic_overdue_expire_ids("store-test", 60_000, 1, &[kept, moved, cancelled])
        .await
        .unwrap();
    assert_eq!(expired, vec![kept]);
    let status = |id| {
        let store = db.store.clone();
        async move { store.job_get(id).await.unwrap().status }
    };
    assert_eq!(status(kept).await, Status::Expired);
    assert_eq!(status(moved).await, Status::Pending);
    assert_eq!(status(cancelled).await, Status::Cancelled);
    let history = db.store.job_history(moved).await.unwrap();
    assert!(
        history.iter().all(|event| event.status != Status::Expired),
        "no history row for a row left alone: {history:?}"
    );

    // The defer: `deferred` is the only overdue row left (the cap of 0
    // keeps none), and it is moved; `moved` is not overdue and is not.
    let before = db.store.job_get(moved).await.unwrap().schedule_time;
    let (moved_now, drain) = db
        .store
        .topic_overdue_defer("store-test", 60_000, 0, 10, None)
        .await
        .unwrap();
    assert_eq!(moved_now, vec![deferred]);
    assert_eq!(drain.ranked, 1);
    assert!(db.store.job_get(deferred).await.unwrap().schedule_time > Utc::now());
    assert_eq!(db.store.job_get(moved).await.unwrap().schedule_time, before);
    db.finish().await;
}
