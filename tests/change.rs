//! Changing your mind: reschedule and modify with optimistic versions,
//! definitive cancel (raced against dispatch), idempotent and batch create,
//! listing with cursors, history with actors.

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use serde_json::{json, Value};
use tickler_testkit::{records_read, TestEnv};

async fn patch(env: &TestEnv, id: u64, body: Value) -> (u16, Value) {
    env.request("PATCH", &format!("/v1/jobs/{id}"), Some(body.to_string()))
        .await
}

async fn cancel(env: &TestEnv, id: u64) -> (u16, Value) {
    env.request("DELETE", &format!("/v1/jobs/{id}"), None).await
}

fn ms(header: Option<&str>) -> i64 {
    header.unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_moved_later_is_not_produced_at_its_old_time() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"key": "moved", "payload": 1, "delay_ms": 1000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let new_at = Utc::now() + chrono::Duration::milliseconds(3500);
    let (status, moved) = patch(
        &env,
        id,
        json!({"version": job["version"], "run_at": new_at.to_rfc3339()}),
    )
    .await;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(moved["version"], job["version"].as_u64().unwrap() + 1);
    env.job_create(json!({"key": "witness", "payload": 2, "delay_ms": 1500}))
        .await;

    let records = records_read(&consumer, 2, Duration::from_secs(10)).await;
    let keys: Vec<_> = records.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, vec!["witness", "moved"], "the witness first");
    let moved_record = &records[1];
    assert_eq!(
        ms(moved_record.header("tickler-scheduled-at")),
        new_at.timestamp_millis()
    );
    assert!(ms(moved_record.header("tickler-dispatched-at")) >= new_at.timestamp_millis());
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_moved_earlier_fires_at_its_new_time_with_its_new_payload() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": "old", "delay_ms": 120_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let (status, moved) = patch(
        &env,
        id,
        json!({"version": job["version"], "delay_ms": 500, "payload": "new", "headers": {"h": "v"}}),
    )
    .await;
    assert_eq!(status, 200, "{moved}");
    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(
        records.len(),
        1,
        "fires at its new time, not in two minutes"
    );
    assert_eq!(records[0].payload, b"\"new\"");
    assert_eq!(records[0].header("h"), Some("v"));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_across_the_window_edge_follows_in_redis() {
    let env = TestEnv::start().await;
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 60_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    assert!(env.redis_holds(id).await);
    let (status, out) = patch(
        &env,
        id,
        json!({"version": 1, "delay_ms": 30u64 * 86_400_000}),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    assert!(
        !env.redis_holds(id).await,
        "moved out of the window: gone from redis"
    );
    let (status, back) = patch(&env, id, json!({"version": 2, "delay_ms": 60_000})).await;
    assert_eq!(status, 200, "{back}");
    assert!(env.redis_holds(id).await, "moved into the window: indexed");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_version_or_a_finished_job_is_a_409_with_the_job() {
    let env = TestEnv::start().await;
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 60_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let (status, _) = patch(&env, id, json!({"version": 1, "delay_ms": 70_000})).await;
    assert_eq!(status, 200);
    let (status, reply) = patch(&env, id, json!({"version": 1, "delay_ms": 80_000})).await;
    assert_eq!(status, 409);
    assert_eq!(reply["error"]["code"], "version_conflict");
    assert_eq!(reply["job"]["version"], 2, "the current job comes back");

    let (status, reply) = patch(&env, id, json!({"version": 2})).await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, reply) = patch(&env, id, json!({"delay_ms": 5})).await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );

    cancel(&env, id).await;
    let (status, reply) = patch(&env, id, json!({"version": 3, "delay_ms": 5})).await;
    assert_eq!(status, 409);
    assert_eq!(reply["error"]["code"], "not_pending");
    assert_eq!(reply["job"]["status"], "cancelled");
    let (status, _) = patch(&env, 999_999, json!({"version": 1, "delay_ms": 5})).await;
    assert_eq!(status, 404);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_answers_cancelled_too_late_or_in_flight() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let later = env
        .job_create(json!({"payload": 1, "delay_ms": 60_000}))
        .await;
    let (status, reply) = cancel(&env, later["id"].as_u64().unwrap()).await;
    assert_eq!(
        (status, reply["outcome"].as_str()),
        (200, Some("cancelled"))
    );
    assert!(!env.redis_holds(later["id"].as_u64().unwrap()).await);
    let (status, reply) = cancel(&env, later["id"].as_u64().unwrap()).await;
    assert_eq!(
        (status, reply["outcome"].as_str()),
        (200, Some("cancelled")),
        "idempotent"
    );

    let soon = env.job_create(json!({"payload": 2, "delay_ms": 0})).await;
    let soon_id = soon["id"].as_u64().unwrap();
    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    env.status_await(soon_id, "dispatched", Duration::from_secs(5))
        .await;
    let (status, reply) = cancel(&env, soon_id).await;
    assert_eq!(status, 409);
    assert_eq!(reply["outcome"], "too_late");
    assert_eq!(reply["topic"], env.topic.as_str());
    assert_eq!(reply["kafka"]["partition"], records[0].partition);
    assert_eq!(reply["kafka"]["offset"], records[0].offset);
    assert!(reply["dispatched_at"].is_string());

    // A dispatcher holds this one (as a claim in MySQL looks).
    let held = env
        .job_create(json!({"payload": 3, "delay_ms": 600_000}))
        .await;
    let held_id = held["id"].as_u64().unwrap();
    sqlx::query("UPDATE jobs SET status = 'dispatching', claim_token = 1, claim_expires_at = UTC_TIMESTAMP(3) + INTERVAL 1 MINUTE WHERE id = ?")
        .bind(held_id)
        .execute(&env.sql)
        .await
        .unwrap();
    let (status, reply) = cancel(&env, held_id).await;
    assert_eq!(
        (status, reply["outcome"].as_str()),
        (409, Some("in_flight"))
    );
    let (status, _) = cancel(&env, 999_999).await;
    assert_eq!(status, 404);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_row_does_not_decode_is_cancelled_and_answered_cancelled() {
    let env = TestEnv::start().await;
    let payload_broken = env
        .job_create(json!({"payload": {"n": 1}, "delay_ms": 600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    let headers_broken = env
        .job_create(json!({"payload": 2, "headers": {"h": "v"}, "delay_ms": 600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    // By hand: a payload that says it is compressed and does not expand,
    // headers that are not a JSON object.
    sqlx::query("UPDATE jobs SET payload_kind = 'json+zstd', payload = x'0000ffff' WHERE id = ?")
        .bind(payload_broken)
        .execute(&env.sql)
        .await
        .unwrap();
    sqlx::query("UPDATE jobs SET headers = '7' WHERE id = ?")
        .bind(headers_broken)
        .execute(&env.sql)
        .await
        .unwrap();
    for id in [payload_broken, headers_broken] {
        let (status, reply) = cancel(&env, id).await;
        assert_eq!(
            (status, reply["outcome"].as_str()),
            (200, Some("cancelled")),
            "{reply}"
        );
        assert_eq!(reply["job"]["id"], id, "{reply}");
        assert_eq!(reply["job"]["status"], "cancelled", "{reply}");
        // Answered without what does not decode.
        assert!(reply["job"]["payload"].is_null(), "{reply}");
        assert_eq!(reply["job"]["headers"], json!({}), "{reply}");
        assert_eq!(env.job_status(id).await, "cancelled");
        let recorded: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM job_events WHERE job_id = ? AND status = 'cancelled'",
        )
        .bind(id)
        .fetch_one(&env.sql)
        .await
        .unwrap();
        assert_eq!(recorded, 1, "the cancel is in the history");
        assert!(!env.redis_holds(id).await);
        let (status, reply) = cancel(&env, id).await;
        assert_eq!(
            (status, reply["outcome"].as_str()),
            (200, Some("cancelled")),
            "again: {reply}"
        );
    }
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_answered_cancelled_never_reaches_kafka_even_racing_dispatch() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let rounds = 300;
    // Jobs due over ~1.5 s; each cancelled around the moment the
    // dispatcher claims it: at its due time, or up to three lookaheads
    // before (it is claimed `dispatcher.lookahead_ms` ahead).
    let lookahead = env.config.dispatcher.lookahead_ms as i64;
    // One batch request: created one by one on a loaded machine, the
    // first jobs were produced before the last was created, and no cancel
    // could race anything.
    let start = Utc::now() + chrono::Duration::milliseconds(1500);
    let dues: Vec<_> = (0..rounds)
        .map(|n| start + chrono::Duration::milliseconds(5 * n))
        .collect();
    let batch: Vec<Value> = dues
        .iter()
        .enumerate()
        .map(|(n, due)| json!({"topic": env.topic, "payload": n, "run_at": due.to_rfc3339()}))
        .collect();
    let (status, answer) = env.post("/v1/jobs/batch", json!({ "jobs": batch })).await;
    assert_eq!(status, 200, "{answer}");
    let mut jobs = Vec::new();
    for (n, (item, due)) in answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&dues)
        .enumerate()
    {
        assert_eq!(item["result"], "created", "{item}");
        let at = *due - chrono::Duration::milliseconds(lookahead * (n as i64 % 4));
        jobs.push((item["id"].as_u64().unwrap(), at));
    }
    let outcomes: Vec<(u64, String)> = futures::stream::iter(jobs.iter().copied())
        .map(|(id, at)| {
            let env = &env;
            async move {
                if let Ok(wait) = (at - Utc::now()).to_std() {
                    tokio::time::sleep(wait).await;
                }
                let (_, reply) = cancel(env, id).await;
                (id, reply["outcome"].as_str().unwrap_or("?").to_owned())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let cancelled: HashSet<u64> = outcomes
        .iter()
        .filter(|(_, o)| o == "cancelled")
        .map(|(id, _)| *id)
        .collect();
    let produced_expected = rounds as usize - cancelled.len();
    let records = records_read(&consumer, produced_expected + 1, Duration::from_secs(8)).await;
    let produced: HashSet<u64> = records
        .iter()
        .map(|r| r.header("tickler-job-id").unwrap().parse().unwrap())
        .collect();
    eprintln!(
        "cancel race: {} cancelled, {} too late or in flight, {} produced",
        cancelled.len(),
        rounds as usize - cancelled.len(),
        produced.len()
    );
    assert!(
        produced.is_disjoint(&cancelled),
        "a job answered cancelled was produced"
    );
    assert_eq!(
        produced.len(),
        produced_expected,
        "every job not cancelled was produced"
    );
    assert!(
        !cancelled.is_empty() && produced_expected > 0,
        "the race had both outcomes: {outcomes:?}"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicate_creates_make_one_job() {
    let env = TestEnv::start().await;
    let body =
        json!({"topic": env.topic, "key": "once", "payload": 1, "run_at": "2031-01-01T00:00:00Z"});
    let replies: Vec<(u16, Value)> = futures::stream::iter(0..20)
        .map(|_| env.post("/v1/jobs", body.clone()))
        .buffer_unordered(20)
        .collect()
        .await;
    let ids: HashSet<u64> = replies
        .iter()
        .map(|(_, job)| job["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "{replies:?}");
    let created = replies.iter().filter(|(status, _)| *status == 201).count();
    assert_eq!(created, 1, "one 201, the rest 200");
    assert!(replies
        .iter()
        .all(|(status, _)| *status == 201 || *status == 200));
    assert_eq!(env.jobs_count().await, 1);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_reports_each_item_and_writes_the_valid_ones() {
    let env = TestEnv::start_with(|c| c.jobs.batch_max = 5).await;
    let consumer = env.consumer();
    env.job_create(json!({"key": "taken", "payload": 1, "run_at": "2031-01-01T00:00:00Z"}))
        .await;
    let t = env.topic.clone();
    let body = json!({"jobs": [
        {"topic": t, "key": "a", "payload": {"n": 1}, "delay_ms": 300},
        {"topic": t, "payload": "no key", "delay_ms": 300},
        {"topic": "bad topic!", "delay_ms": 1},
        {"topic": t, "key": "taken", "payload": 1, "run_at": "2031-01-01T00:00:00Z"},
        {"topic": t, "key": "taken", "payload": 2, "run_at": "2031-01-01T00:00:00Z"},
    ]});
    let (status, reply) = env.post("/v1/jobs/batch", body).await;
    assert_eq!(status, 200, "{reply}");
    let results = reply["results"].as_array().unwrap();
    let kinds: Vec<&str> = results
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        vec!["created", "created", "error", "existing", "error"]
    );
    assert_eq!(results[2]["error"]["code"], "invalid_topic");
    assert_eq!(results[4]["error"]["code"], "key_conflict");
    assert_eq!(env.jobs_count().await, 3);
    // The created ones are real jobs and fire.
    let records = records_read(&consumer, 2, Duration::from_secs(10)).await;
    let mut ids: Vec<String> = records
        .iter()
        .map(|r| r.header("tickler-job-id").unwrap().to_owned())
        .collect();
    ids.sort();
    let mut expected = vec![results[0]["id"].to_string(), results[1]["id"].to_string()];
    expected.sort();
    assert_eq!(ids, expected);

    let six: Vec<Value> = (0..6)
        .map(|n| json!({"topic": t, "payload": n, "delay_ms": 1}))
        .collect();
    let (status, reply) = env.post("/v1/jobs/batch", json!({"jobs": six})).await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    assert_eq!(
        env.jobs_count().await,
        3,
        "an oversized batch writes nothing"
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_filters_and_pages_without_skipping_while_rows_change() {
    let env = TestEnv::start().await;
    let mut ids = Vec::new();
    for n in 0..25 {
        let at = format!("2031-01-01T00:00:{n:02}Z");
        let job = env
            .job_create(json!({"key": format!("k{n}"), "payload": n, "run_at": at}))
            .await;
        ids.push(job["id"].as_u64().unwrap());
    }
    // Page through, cancelling jobs between pages.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/jobs?topic={}&limit=7", env.topic);
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = env.get(&path).await;
        assert_eq!(status, 200, "{page}");
        for job in page["jobs"].as_array().unwrap() {
            assert!(job.get("payload").is_none(), "listings carry no payloads");
            seen.push(job["id"].as_u64().unwrap());
        }
        cancel(&env, ids[seen.len().min(24)]).await;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids, "each job once, in order");

    let (_, cancelled) = env
        .get(&format!(
            "/v1/jobs?topic={}&status=cancelled&limit=100",
            env.topic
        ))
        .await;
    let n_cancelled = cancelled["jobs"].as_array().unwrap().len();
    assert!(n_cancelled >= 3, "{cancelled}");
    let (_, ranged) = env
        .get(&format!(
            "/v1/jobs?topic={}&run_at_from=2031-01-01T00:00:10Z&run_at_to=2031-01-01T00:00:15Z",
            env.topic
        ))
        .await;
    assert_eq!(ranged["jobs"].as_array().unwrap().len(), 5);
    let (_, by_key) = env
        .get(&format!("/v1/jobs?topic={}&key=k7", env.topic))
        .await;
    assert_eq!(by_key["jobs"][0]["id"], ids[7]);
    let (status, reply) = env.get("/v1/jobs?status=lost").await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let (status, _) = env.get("/v1/jobs?cursor=nonsense").await;
    assert_eq!(status, 400);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_every_change_with_its_actor() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 60_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    patch(&env, id, json!({"version": 1, "delay_ms": 200})).await;
    records_read(&consumer, 1, Duration::from_secs(10)).await;
    env.status_await(id, "dispatched", Duration::from_secs(5))
        .await;
    // A person requeues it by hand.
    sqlx::query("UPDATE jobs SET status = 'pending', attempt = attempt + 1, schedule_time = UTC_TIMESTAMP(3) + INTERVAL 1 HOUR WHERE id = ?")
        .bind(id)
        .execute(&env.sql)
        .await
        .unwrap();
    // Recorded by the reconciler's next pass (hand edits observed).
    env.history_await(id, "sql", "pending", Duration::from_secs(10))
        .await;

    let (status, history) = env.get(&format!("/v1/jobs/{id}/history")).await;
    assert_eq!(status, 200);
    let steps: Vec<(String, String)> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap().to_owned(),
                e["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    // The API's changes name the token that made them.
    let expected: Vec<(String, String)> = [
        ("api:test-admin", "pending"),
        ("api:test-admin", "pending"),
        // The claim (pending → dispatching) leaves no row: it lasts
        // milliseconds (migration V20).
        ("dispatcher", "dispatched"),
        ("sql", "pending"),
    ]
    .iter()
    .map(|(a, s)| (a.to_string(), s.to_string()))
    .collect();
    assert_eq!(steps, expected, "{history}");
    assert_eq!(history["events"][3]["attempt"], 2);
    let (status, _) = env.get("/v1/jobs/999999/history").await;
    assert_eq!(status, 404);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_past_fires_at_once_and_years_ahead_is_accepted() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let past = env
        .job_create(json!({"payload": 1, "run_at": "2020-02-29T12:00:00+05:00"}))
        .await;
    assert_eq!(past["run_at"], "2020-02-29T07:00:00.000Z");
    let far = env.job_create(json!({"payload": 2, "run_at": (Utc::now() + chrono::Duration::days(9 * 365)).to_rfc3339()})).await;
    assert_eq!(far["status"], "pending");
    let records = records_read(&consumer, 1, Duration::from_secs(10)).await;
    assert_eq!(
        records[0].header("tickler-job-id"),
        Some(past["id"].to_string().as_str())
    );
    assert!(!env.redis_holds(far["id"].as_u64().unwrap()).await);
    env.finish().await;
}

/// A job not produced by its `expires_at` ends `expired` and is never
/// produced (#45): one created overdue with its expiry past too — tickler
/// was down, say — beside one whose expiry is a minute after its time,
/// produced as usual. A cancel of the expired one answers `cancelled`: it
/// will never be produced either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_expiry_ends_expired_and_is_never_produced() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let now = Utc::now();
    let late = env
        .job_create(json!({
            "payload": "late",
            "run_at": (now - chrono::Duration::seconds(10)).to_rfc3339(),
            "expires_at": (now - chrono::Duration::seconds(5)).to_rfc3339(),
        }))
        .await;
    let late_id = late["id"].as_u64().unwrap();
    assert!(late["expires_at"].is_string(), "{late}");
    let fine = env
        .job_create(json!({"payload": "fine", "delay_ms": 0, "ttl_ms": 60000}))
        .await;
    let fine_id = fine["id"].as_u64().unwrap();

    let records = records_read(&consumer, 2, Duration::from_secs(5)).await;
    let ids: Vec<&str> = records
        .iter()
        .filter_map(|r| r.header("tickler-job-id"))
        .collect();
    assert_eq!(
        ids,
        vec![fine_id.to_string().as_str()],
        "only the one in time"
    );
    assert_eq!(env.job_status(late_id).await, "expired");
    let (_, job) = env.get(&format!("/v1/jobs/{late_id}")).await;
    assert_eq!(job["last_error"], "expired: not produced by its expires_at");
    let (status, answer) = cancel(&env, late_id).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["job"]["status"], "expired");
    let (_, history) = env.get(&format!("/v1/jobs/{late_id}/history")).await;
    let statuses: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["status"].as_str())
        .collect();
    assert_eq!(statuses.last(), Some(&"expired"), "{history}");
    env.finish().await;
}

/// A PATCH that moves a job past its own expiry is refused, naming the
/// way out, and writes nothing; with a new expiry (or `expires_at: null`)
/// it applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_past_the_jobs_expiry_is_refused_unless_the_expiry_moves_too() {
    let env = TestEnv::start().await;
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 60000, "ttl_ms": 1000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let later = (Utc::now() + chrono::Duration::minutes(10)).to_rfc3339();
    let (status, refused) = patch(
        &env,
        id,
        json!({"version": job["version"], "run_at": later}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_expiry");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expires_at: null"),
        "{refused}"
    );
    let (_, unchanged) = env.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(unchanged["version"], job["version"], "nothing written");

    let (status, moved) = patch(
        &env,
        id,
        json!({"version": job["version"], "run_at": later, "ttl_ms": 5000}),
    )
    .await;
    assert_eq!(status, 200, "{moved}");
    let run_at = chrono::DateTime::parse_from_rfc3339(moved["run_at"].as_str().unwrap()).unwrap();
    let expires_at =
        chrono::DateTime::parse_from_rfc3339(moved["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!((expires_at - run_at).num_milliseconds(), 5000);
    let (status, cleared) = patch(
        &env,
        id,
        json!({"version": moved["version"], "expires_at": null}),
    )
    .await;
    assert_eq!(status, 200, "{cleared}");
    assert!(cleared["expires_at"].is_null(), "{cleared}");
    env.finish().await;
}

/// A flexible window (#45): 120 keyed jobs asked for one instant with a 3 s
/// window go out spread over it — none before their time, none after the
/// window's end — and each job shows its window and the instant decided.
/// Created again, a job keeps its instant; moved, it keeps its offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_with_a_window_go_out_spread_over_it_never_early_or_past_it() {
    let env = TestEnv::start().await;
    let consumer = env.consumer();
    let run_at = Utc::now() + chrono::Duration::seconds(2);
    let topic = env.topic.clone();
    let body = |i: usize| json!({"topic": topic, "key": format!("w{i}"), "payload": i, "run_at": run_at.to_rfc3339(), "window_ms": 3000});
    let (status, answer) = env
        .post(
            "/v1/jobs/batch",
            json!({"jobs": (0..120).map(body).collect::<Vec<_>>()}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let ids: Vec<u64> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    let (_, first) = env.get(&format!("/v1/jobs/{}", ids[0])).await;
    let asked = chrono::DateTime::parse_from_rfc3339(first["run_at"].as_str().unwrap()).unwrap();
    assert_eq!(
        asked.timestamp_millis(),
        run_at.timestamp_millis(),
        "run_at is the time asked for"
    );
    assert_eq!(first["window_ms"], 3000);
    let produce_at = first["produce_at"].as_str().unwrap().to_owned();
    // The same create again: the same job, the same instant.
    let (status, again) = env.post("/v1/jobs", body(0)).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["produce_at"], produce_at.as_str());

    let records = records_read(&consumer, 120, Duration::from_secs(15)).await;
    assert_eq!(records.len(), 120);
    let start = run_at.timestamp_millis();
    let sent: Vec<i64> = records
        .iter()
        .map(|r| ms(r.header("tickler-dispatched-at")) - start)
        .collect();
    assert!(
        sent.iter().all(|at| *at >= 0),
        "none before its time: {sent:?}"
    );
    assert!(
        sent.iter().all(|at| *at <= 3_000 + 500),
        "none past the window: {sent:?}"
    );
    let (early, late) = (
        sent.iter().filter(|at| **at < 1_500).count(),
        sent.iter().filter(|at| **at >= 1_500).count(),
    );
    assert!(
        early > 30 && late > 30,
        "spread over the window: {early} in its first half, {late} in its second"
    );

    // Moved, a keyed job keeps its place in the window.
    let later = env
        .job_create(json!({"key": "moved", "payload": 1, "delay_ms": 600000, "window_ms": 60000}))
        .await;
    let offset = |job: &Value| {
        let at = |field: &str| {
            chrono::DateTime::parse_from_rfc3339(job[field].as_str().unwrap()).unwrap()
        };
        (at("produce_at") - at("run_at")).num_milliseconds()
    };
    let new_at = (Utc::now() + chrono::Duration::minutes(30)).to_rfc3339();
    let (status, moved) = patch(
        &env,
        later["id"].as_u64().unwrap(),
        json!({"version": later["version"], "run_at": new_at}),
    )
    .await;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(offset(&moved), offset(&later));
    assert_eq!(moved["window_ms"], 60000);
    let (status, unwindowed) = patch(
        &env,
        later["id"].as_u64().unwrap(),
        json!({"version": moved["version"], "window_ms": null}),
    )
    .await;
    assert_eq!(status, 200, "{unwindowed}");
    assert!(
        unwindowed["window_ms"].is_null() && unwindowed["produce_at"].is_null(),
        "{unwindowed}"
    );
    assert_eq!(
        unwindowed["run_at"], moved["run_at"],
        "back to the time asked for"
    );

    // Held past its window (its topic paused), a job goes out late, and
    // says so.
    let topic = env.topic.clone();
    let (status, _) = env
        .post(&format!("/v1/topics/{topic}/pause"), json!({}))
        .await;
    assert_eq!(status, 200);
    let held = env
        .job_create(json!({"key": "held", "payload": 1, "delay_ms": 100, "window_ms": 200}))
        .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (status, _) = env
        .post(&format!("/v1/topics/{topic}/resume"), json!({}))
        .await;
    assert_eq!(status, 200);
    let id = held["id"].as_u64().unwrap();
    let late = tickler_testkit::eventually(Duration::from_secs(10), || async {
        let (_, job) = env.get(&format!("/v1/jobs/{id}")).await;
        (job["status"] == "dispatched").then_some(job)
    })
    .await
    .expect("produced after the resume");
    assert!(
        late["last_error"].as_str().is_some_and(
            |e| e.starts_with("produced ") && e.ends_with(" ms after its window ended")
        ),
        "{late}"
    );
    let (_, metrics) = env.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("tickler_window_missed_total{")
                && line.contains(&env.topic)
                && line.ends_with(" 1")),
        "counted: {}",
        metrics
            .lines()
            .filter(|l| l.contains("window_missed"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    env.finish().await;
}

/// `dispatcher.smooth_per_second` (#45): jobs without a window go at their
/// time whatever it says; windowed jobs due beside them fill the gaps
/// after, inside their windows. Here 150 fixed jobs and 150 with a 6 s
/// window fall due at one instant under 50/s: the fixed ones take the
/// first 3 s of the pace, so the windowed ones (about half of them placed
/// in those 3 s by their keys) go after it, never before their time nor
/// past their window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windowed_jobs_fill_the_gaps_under_the_deployments_smoothing_pace() {
    let env = TestEnv::start_with(|c| c.dispatcher.smooth_per_second = Some(50)).await;
    let consumer = env.consumer();
    let run_at = Utc::now() + chrono::Duration::seconds(2);
    let topic = env.topic.clone();
    let body = |i: usize| {
        let mut job = json!({"topic": topic, "key": format!("j{i}"), "payload": i,
                             "run_at": run_at.to_rfc3339()});
        if i % 2 == 1 {
            job["window_ms"] = json!(6_000);
        }
        job
    };
    let (status, answer) = env
        .post(
            "/v1/jobs/batch",
            json!({"jobs": (0..300).map(body).collect::<Vec<_>>()}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    // How many windowed jobs their keys alone place in the first 2.5 s.
    let (_, listed) = env
        .get(&format!("/v1/jobs?topic={}&limit=500", env.topic))
        .await;
    let placed_early = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|job| job["window_ms"] == 6_000)
        .filter(|job| {
            let at =
                chrono::DateTime::parse_from_rfc3339(job["produce_at"].as_str().unwrap()).unwrap();
            (at.timestamp_millis() - run_at.timestamp_millis()) < 2_500
        })
        .count();

    let records = records_read(&consumer, 300, Duration::from_secs(20)).await;
    assert_eq!(records.len(), 300);
    let start = run_at.timestamp_millis();
    let (mut fixed, mut windowed) = (Vec::new(), Vec::new());
    for record in &records {
        let key = record.key.as_deref().unwrap_or_default();
        let i: usize = key.trim_start_matches('j').parse().unwrap();
        let at = ms(record.header("tickler-dispatched-at")) - start;
        if i % 2 == 1 {
            windowed.push(at)
        } else {
            fixed.push(at)
        }
    }
    assert!(
        fixed.iter().all(|at| (0..1_000).contains(at)),
        "jobs without a window are never held: {fixed:?}"
    );
    assert!(
        windowed.iter().all(|at| (0..=6_000).contains(at)),
        "windowed jobs never early, never past the window: {windowed:?}"
    );
    let smoothed_early = windowed.iter().filter(|at| **at < 2_500).count();
    println!(
        "windowed jobs produced in the first 2.5 s: {smoothed_early} (their keys placed {placed_early} there)"
    );
    assert!(
        placed_early > 40 && smoothed_early < 15,
        "the fixed jobs' 3 s of the pace go to them: {smoothed_early} windowed in the first 2.5 s \
         (placed there: {placed_early}): {windowed:?}"
    );
    let (_, late) = env
        .get(&format!("/v1/jobs?topic={}&limit=500", env.topic))
        .await;
    assert!(
        late["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|job| job["last_error"].is_null()),
        "none produced past its window: {late}"
    );
    env.finish().await;
}
