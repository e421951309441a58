//! Who may do what through the API: 401 without a valid token, 403 outside
//! a token's scopes or topics — on every endpoint, writing nothing — lists
//! filtered to a token's topics, revocation within seconds, rate limits,
//! browser-borne requests refused, and connections that cannot be hoarded.

use std::time::Duration;

use serde_json::{json, Value};
use tickler::kafka;
use tickler::roles::service::Service;
use tickler_testkit::{http_with_token, token_create, token_create_limited, unique, TestEnv};
use tokio::io::AsyncWriteExt;

/// The job's row as a string: changes if anything is written.
async fn row(env: &TestEnv, id: u64) -> String {
    let row: (String, u32, u32) =
        sqlx::query_as("SELECT CAST(status AS CHAR), version, attempt FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&env.sql)
            .await
            .unwrap();
    format!("{row:?}")
}

/// Every endpoint, with a request that would succeed for an admin.
fn endpoints(topic: &str, id: u64) -> Vec<(&'static str, String, Option<String>, &'static str)> {
    let create = json!({"topic": topic, "payload": 1, "delay_ms": 60_000}).to_string();
    vec![
        ("POST", "/v1/jobs".into(), Some(create.clone()), "write"),
        (
            "POST",
            "/v1/jobs/batch".into(),
            Some(format!("{{\"jobs\":[{create}]}}")),
            "write",
        ),
        ("GET", format!("/v1/jobs/{id}"), None, "read"),
        ("GET", format!("/v1/jobs/{id}/history"), None, "read"),
        (
            "PATCH",
            format!("/v1/jobs/{id}"),
            Some(json!({"version": 1, "delay_ms": 90_000}).to_string()),
            "write",
        ),
        (
            "POST",
            format!("/v1/jobs/{id}/result"),
            Some(json!({"attempt": 1, "outcome": "ok"}).to_string()),
            "results",
        ),
        ("POST", format!("/v1/jobs/{id}/redrive"), None, "admin"),
        ("DELETE", format!("/v1/jobs/{id}"), None, "write"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_refuses_the_wrong_caller_and_writes_nothing() {
    let env = TestEnv::start().await;
    let other = unique("tickler-other-");
    kafka::topic_ensure(&env.config.kafka.brokers, &other, 1)
        .await
        .unwrap();
    let url = &env.config.mysql.url;
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 60_000}))
        .await;
    let id = job["id"].as_u64().unwrap();
    let before = (row(&env, id).await, env.jobs_count().await);

    let anonymous = reqwest::Client::new();
    let bad_secret = http_with_token("tkl_not-a-real-secret");
    // Every scope, but only the other topic.
    let elsewhere = http_with_token(&token_create(url, "elsewhere", &[&other], &["admin"]).await);
    let mut malformed_headers = reqwest::header::HeaderMap::new();
    malformed_headers.insert("authorization", "Basic dXNlcjpwYXNz".parse().unwrap());
    let malformed = reqwest::Client::builder()
        .default_headers(malformed_headers)
        .build()
        .unwrap();

    for (method, path, body, scope) in endpoints(&env.topic, id) {
        for (who, client) in [
            ("no token", &anonymous),
            ("unknown", &bad_secret),
            ("basic", &malformed),
        ] {
            let (status, answer) = env.request_with(client, method, &path, body.clone()).await;
            assert_eq!(status, 401, "{who} {method} {path}: {answer}");
            assert_eq!(answer["error"]["code"], "unauthorized");
        }
        // A token with every scope but this one, on every topic.
        let others: Vec<&str> = ["read", "write", "results", "metrics"]
            .into_iter()
            .filter(|s| *s != scope)
            .collect();
        let name = unique("lacks-");
        let lacking = http_with_token(&token_create(url, &name, &["*"], &others).await);
        let (status, answer) = env
            .request_with(&lacking, method, &path, body.clone())
            .await;
        assert_eq!(status, 403, "without {scope}: {method} {path}: {answer}");
        assert_eq!(answer["error"]["code"], "forbidden_scope", "{answer}");
        let (status, answer) = env
            .request_with(&elsewhere, method, &path, body.clone())
            .await;
        if path == "/v1/jobs/batch" {
            // A batch answers per item, as for every other item's mistake.
            assert_eq!(status, 200, "{answer}");
            assert_eq!(
                answer["results"][0]["error"]["code"], "forbidden_topic",
                "{answer}"
            );
        } else {
            assert_eq!(status, 403, "other topic: {method} {path}: {answer}");
            assert_eq!(
                answer["error"]["code"], "forbidden_topic",
                "{method} {path}: {answer}"
            );
        }
    }
    assert_eq!(
        (row(&env, id).await, env.jobs_count().await),
        before,
        "nothing was written"
    );

    // /metrics needs the metrics scope; /healthz is open and says only up.
    let (status, _) = env.request_with(&anonymous, "GET", "/metrics", None).await;
    assert_eq!(status, 401);
    let (status, _) = env.request_with(&elsewhere, "GET", "/metrics", None).await;
    assert_eq!(status, 200, "admin includes metrics");
    let (status, health) = env.request_with(&anonymous, "GET", "/healthz", None).await;
    assert_eq!((status, health), (200, json!({"status": "ok"})));
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_sees_and_changes_only_its_topics_and_is_named_in_the_history() {
    let env = TestEnv::start_with(|c| c.api.token_refresh_ms = 300).await;
    let other = unique("tickler-other-");
    kafka::topic_ensure(&env.config.kafka.brokers, &other, 1)
        .await
        .unwrap();
    let url = &env.config.mysql.url;
    // The topic is seconds old: the API's cache of the broker's topics may
    // take a moment to see it.
    let theirs = tickler_testkit::eventually(Duration::from_secs(10), || async {
        let (status, job) = env
            .post(
                "/v1/jobs",
                json!({"topic": other, "payload": 1, "delay_ms": 60_000}),
            )
            .await;
        (status == 201).then_some(job)
    })
    .await
    .expect("created on the other topic");
    let secret = token_create(
        url,
        "billing-svc",
        &[&format!("{}*", &env.topic[..14])],
        &["read", "write"],
    )
    .await;
    let billing = http_with_token(&secret);
    // 14 characters: "tickler-test-" and one more; the other topic shares none of it.
    assert!(!other.starts_with(&env.topic[..14]));
    let (status, mine) = env
        .request_with(
            &billing,
            "POST",
            "/v1/jobs",
            Some(json!({"topic": env.topic, "payload": 2, "delay_ms": 60_000}).to_string()),
        )
        .await;
    assert_eq!(status, 201, "{mine}");
    let (status, list) = env.request_with(&billing, "GET", "/v1/jobs", None).await;
    assert_eq!(status, 200);
    let ids: Vec<u64> = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        ids,
        vec![mine["id"].as_u64().unwrap()],
        "only its own topic's jobs: {list}"
    );
    let (status, _) = env
        .request_with(&billing, "GET", &format!("/v1/jobs?topic={other}"), None)
        .await;
    assert_eq!(status, 403);
    let (status, _) = env
        .request_with(&billing, "GET", &format!("/v1/jobs/{}", theirs["id"]), None)
        .await;
    assert_eq!(status, 403);
    let (_, history) = env.get(&format!("/v1/jobs/{}/history", mine["id"])).await;
    assert_eq!(
        history["events"][0]["actor"], "api:billing-svc",
        "{history}"
    );

    // Revoked: refused within api.token_refresh_ms.
    let store = tickler::store::Store::connect_lazy(url, 1, tickler::store::Actor::Api).unwrap();
    assert!(store.token_revoke("billing-svc").await.unwrap());
    let refused = tickler_testkit::eventually(Duration::from_secs(5), || async {
        let (status, _) = env.request_with(&billing, "GET", "/v1/jobs", None).await;
        (status == 401).then_some(())
    })
    .await;
    assert!(
        refused.is_some(),
        "a revoked token is refused within seconds"
    );
    store.close().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_the_rate_gets_429_with_retry_after_and_writes_nothing_more() {
    let env = TestEnv::start().await;
    let url = &env.config.mysql.url;
    let chatty = http_with_token(
        &token_create_limited(url, "chatty", &["*"], &["read"], Some(5), Some(0)).await,
    );
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..20 {
        let response = chatty
            .get(format!("{}/v1/jobs", env.base_url))
            .send()
            .await
            .unwrap();
        if response.status() == 429 {
            retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
        }
        statuses.push(response.status().as_u16());
    }
    assert!(
        statuses.iter().filter(|s| **s == 200).count() >= 5,
        "{statuses:?}"
    );
    assert!(statuses.contains(&429), "{statuses:?}");
    let retry_after: u64 = retry_after.expect("Retry-After on a 429").parse().unwrap();
    assert!((1..=2).contains(&retry_after), "{retry_after}");

    let creator = http_with_token(
        &token_create_limited(url, "creator", &["*"], &["write"], Some(0), Some(3)).await,
    );
    let job = json!({"topic": env.topic, "payload": 1, "delay_ms": 60_000});
    let batch = json!({"jobs": [job, job, job, job, job]}).to_string();
    let (status, answer) = env
        .request_with(&creator, "POST", "/v1/jobs/batch", Some(batch))
        .await;
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["error"]["code"], "rate_limited");
    let mut created = 0;
    for _ in 0..6 {
        let (status, _) = env
            .request_with(&creator, "POST", "/v1/jobs", Some(job.to_string()))
            .await;
        created += usize::from(status == 201);
    }
    assert!((3..6).contains(&created), "{created}");
    assert_eq!(
        env.jobs_count().await,
        created as i64,
        "a 429 writes nothing"
    );
    env.finish().await;
}

/// A token's rates hold across every instance together (#46): the same
/// token behind two instances gets its rate once, not once per instance;
/// and with Redis out of reach the check falls back to each instance's own
/// count and refuses nothing it would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_rates_hold_across_instances_and_fail_open_without_redis() {
    let redis = tickler_testkit::procs::PrivateRedis::start().await;
    let redis_url = redis.url();
    let env = TestEnv::start_with(|c| c.redis.url = redis_url).await;
    let second = env.another().await;
    let second_url = format!("http://{}", second.http_addr.unwrap());
    let url = &env.config.mysql.url;
    let chatty = http_with_token(
        &token_create_limited(url, "chatty", &["*"], &["read"], Some(10), Some(0)).await,
    );
    let started = std::time::Instant::now();
    let mut admitted = 0;
    for i in 0..40 {
        let base = if i % 2 == 0 {
            &env.base_url
        } else {
            &second_url
        };
        let response = chatty.get(format!("{base}/v1/jobs")).send().await.unwrap();
        admitted += usize::from(response.status() == 200);
    }
    let elapsed = started.elapsed().as_secs_f64();
    // A second's burst of 10, and 10 a second since: alone, each instance
    // would have let 10 through at once, 20 in all.
    let most = 10 + (elapsed * 10.0).ceil() as usize;
    println!(
        "40 requests in {elapsed:.3} s over two instances: {admitted} admitted (at most {most})"
    );
    assert!(
        (10..=most).contains(&admitted),
        "{admitted} admitted in {elapsed:.3} s"
    );

    let creator = http_with_token(
        &token_create_limited(url, "creator", &["*"], &["write"], Some(0), Some(100)).await,
    );
    let batch = |n: usize| {
        let job = json!({"topic": env.topic, "payload": 1, "delay_ms": 60_000});
        json!({"jobs": vec![job; n]}).to_string()
    };
    let (status, answer) = env
        .request_with(&creator, "POST", "/v1/jobs/batch", Some(batch(70)))
        .await;
    assert_eq!(status, 200, "{answer}");
    let response = creator
        .post(format!("{second_url}/v1/jobs/batch"))
        .header("content-type", "application/json")
        .body(batch(70))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        429,
        "the other instance knows the first 70"
    );
    assert_eq!(env.jobs_count().await, 70, "a 429 writes nothing");

    // Redis gone: each instance counts alone, and nothing is refused for it.
    drop(redis);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (status, answer) = env
        .request_with(&creator, "POST", "/v1/jobs/batch", Some(batch(50)))
        .await;
    assert_eq!(status, 200, "fails open: {answer}");
    let (_, metrics) = env.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tickler_rate_fallback_total ") && !l.ends_with(" 0")),
        "counted"
    );
    second.shutdown().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_cannot_be_made_to_act_for_an_operator() {
    let env = TestEnv::start().await;
    let job = env
        .job_create(json!({"payload": 1, "delay_ms": 60_000}))
        .await;
    let url = format!("{}/v1/jobs/{}/redrive", env.base_url, job["id"]);
    let form = env
        .http
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", "https://evil.example")
        .body("a=1")
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 403, "foreign origin");
    let form = env
        .http
        .post(&url)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 415);
    // A body-less POST with a token needs no content type: a page cannot
    // add the Authorization header without a preflight either. It reaches
    // the handler (the job is pending: not dead, nothing to redrive).
    let bare = env.http.post(&url).send().await.unwrap();
    assert_eq!(
        bare.status(),
        409,
        "a body-less POST with a token is handled"
    );
    let preflight = env
        .http
        .request(reqwest::Method::OPTIONS, &url)
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 405);
    assert!(preflight
        .headers()
        .keys()
        .all(|k| !k.as_str().starts_with("access-control")));
    assert_eq!(env.job_status(job["id"].as_u64().unwrap()).await, "pending");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_do_not_stop_a_real_client() {
    let env = TestEnv::start_with(|c| {
        c.api.header_timeout_ms = 2_000;
        c.api.body_timeout_ms = 1_000;
    })
    .await;
    let addr = env.base_url.trim_start_matches("http://").to_owned();
    let mut held = Vec::new();
    for i in 0..3_000 {
        let Ok(mut stream) = tokio::net::TcpStream::connect(&addr).await else {
            break;
        };
        if i % 3 == 0 {
            let _ = stream
                .write_all(b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .await;
        }
        held.push(stream);
    }
    assert!(held.len() >= 2_000, "held {}", held.len());
    let served = env
        .http
        .get(format!("{}/healthz", env.base_url))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("a real client is served");
    assert_eq!(served.status(), 200);

    // The server closes what it was left holding: reads end.
    let mut stream = held.pop().unwrap();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        use tokio::io::AsyncReadExt;
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "an idle connection is closed after the header timeout"
    );
    drop(held);

    // A body that never finishes: 408.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"topic\"",
        env.admin_secret
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        use tokio::io::AsyncReadExt;
        let _ = slow.read_to_end(&mut answer).await;
    })
    .await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
    assert_eq!(env.jobs_count().await, 0);
    let _: Value = Value::Null;
    env.finish().await;
}

/// One request and its answer on `stream`: the answer's head and body.
async fn exchange(stream: &mut tokio::net::TcpStream, request: &str) -> String {
    use tokio::io::AsyncReadExt;
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let text = String::from_utf8_lossy(&answer).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if answer.len() >= end + 4 + length {
                    return text;
                }
            }
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the connection closed mid-answer: {text}");
            answer.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    read.expect("an answer within 10 s")
}

/// How long until the server closes `stream`, reading for at most `limit`.
async fn closed_within(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<Duration> {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut buf = [0u8; 256];
    tokio::time::timeout(limit, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// A client that keeps a connection for its next request is never the one
/// racing the server's close: idle time between requests is allowed up to
/// `api.idle_timeout_ms`, while a request's headers still have only
/// `api.header_timeout_ms` from their first byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_outlives_the_header_timeout_but_not_the_idle_one() {
    let env = TestEnv::start_with(|c| {
        c.api.header_timeout_ms = 1_000;
        c.api.idle_timeout_ms = 5_000;
    })
    .await;
    let addr = env.base_url.trim_start_matches("http://").to_owned();
    let health = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let first = exchange(&mut stream, health).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let second = exchange(&mut stream, health).await;
    assert!(
        second.starts_with("HTTP/1.1 200"),
        "served after idling past the header timeout: {second}"
    );

    // Headers begun and never finished: closed by the header timeout.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let closed = closed_within(&mut stream, Duration::from_secs(10)).await;
    let closed = closed.expect("a half-sent request is closed");
    assert!(
        closed < Duration::from_millis(4_000),
        "by the header timeout, not the idle one: {closed:?}"
    );

    // Idle after an answer: closed by the idle timeout.
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let answer = exchange(&mut idle, health).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let closed = closed_within(&mut idle, Duration::from_secs(15)).await;
    let closed = closed.expect("an idle connection is closed");
    assert!(
        closed >= Duration::from_millis(4_000),
        "not before the idle timeout: {closed:?}"
    );
    env.finish().await;
}

/// A token may be called anything up to 100 characters: its name is the
/// actor of every change it makes, in the history and in bulk operations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_with_the_longest_name_writes_and_is_named_in_full() {
    let env = TestEnv::start().await;
    let name = format!("svc-{}", "x".repeat(96));
    assert_eq!(name.len(), 100);
    let secret = token_create(&env.config.mysql.url, &name, &["*"], &["admin"]).await;
    let http = http_with_token(&secret);
    let body = json!({"topic": env.topic, "delay_ms": 3_600_000}).to_string();
    let (status, job) = env
        .request_with(&http, "POST", "/v1/jobs", Some(body))
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_u64().unwrap();
    let (status, moved) = env
        .request_with(
            &http,
            "PATCH",
            &format!("/v1/jobs/{id}"),
            Some(json!({"version": 1, "delay_ms": 7_200_000}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{moved}");
    let (_, history) = env.get(&format!("/v1/jobs/{id}/history")).await;
    assert_eq!(
        history["events"][1]["actor"],
        format!("api:{name}"),
        "{history}"
    );
    let bulk =
        json!({"filter": {"topic": env.topic}, "action": {"type": "cancel"}, "dry_run": false});
    let (status, op) = env
        .request_with(&http, "POST", "/v1/jobs/bulk", Some(bulk.to_string()))
        .await;
    assert_eq!(status, 202, "{op}");
    assert_eq!(op["created_by"], format!("api:{name}"));
    env.finish().await;
}

/// The token cache, read by read: a token created is known after the next
/// read, a revoked one is forgotten by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_cache_learns_created_tokens_and_forgets_revoked_ones() {
    use tickler::roles::auth::{AuthError, TokenCache, TokenCacheConfig, TokensReport};
    let env = TestEnv::start().await;
    let mut cache = TokenCache::new(
        env.store.clone(),
        TokenCacheConfig::from_config(&env.config),
    );
    // The test's admin token.
    assert_eq!(
        cache.run_once(chrono::Utc::now()).await.unwrap(),
        TokensReport { active: 1 }
    );
    let name = unique("svc-");
    let secret = token_create(&env.config.mysql.url, &name, &["orders.*"], &["write"]).await;
    assert_eq!(
        cache.run_once(chrono::Utc::now()).await.unwrap(),
        TokensReport { active: 2 }
    );
    assert!(cache.authenticate(&secret).await.is_ok());

    assert!(env.store.token_revoke(&name).await.unwrap());
    assert_eq!(
        cache.run_once(chrono::Utc::now()).await.unwrap(),
        TokensReport { active: 1 }
    );
    assert!(matches!(
        cache.authenticate(&secret).await,
        Err(AuthError::Unknown)
    ));
    env.finish().await;
}

/// A webhook's URL is its credential (Slack's
/// `https://hooks.slack.com/services/T…/B…/XXXX`): its path is shown
/// masked by `tickler config` and in the audit log's row of a start-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhooks_secret_path_is_masked_in_tickler_config_and_the_start_row() {
    let secret = unique("XXXXhook");
    // Nothing answers on port 9: a notification, if any, goes nowhere.
    let hook = format!("http://127.0.0.1:9/services/T000/B000/{secret}");
    let url = hook.clone();
    let env = TestEnv::start_with(move |c| c.notify.webhook_url = Some(url)).await;
    // Written as the instance starts, beside its start.
    let started: String = tickler_testkit::eventually(Duration::from_secs(10), || async {
        sqlx::query_scalar(
            "SELECT CAST(after_json AS CHAR) FROM audit_log \
             WHERE action = 'instance.start' AND after_json IS NOT NULL",
        )
        .fetch_optional(&env.sql)
        .await
        .unwrap()
    })
    .await
    .expect("the start-up's row");
    assert!(!started.contains(&secret), "{started}");
    assert!(!started.contains("/services/"), "{started}");
    assert!(started.contains("http://127.0.0.1:9/***"), "{started}");

    let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
    command
        .arg("config")
        .env("TICKLER_NOTIFY_WEBHOOK_URL", &hook);
    let printed = tickler_testkit::output(command).await;
    let shown = tickler_testkit::output_text(&printed);
    assert!(printed.status.success(), "{shown}");
    assert!(!shown.contains(&secret), "{shown}");
    let shown: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(
        shown["notify"]["webhook_url"],
        json!("http://127.0.0.1:9/***"),
        "{shown}"
    );
    env.finish().await;
}
