//! The audit log (#46), against the real services: every control-plane
//! change through the API, the CLI and a start-up leaves a row with who,
//! when, what (before, request, after) and from where; payloads and
//! secrets never do; only admins read it; a change that cannot be recorded
//! is not made.

use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};
use tickler_testkit::{http_with_token, output, token_create, TestEnv};

/// Runs `tickler ARGS` with `env` (the API's address and `token`, the
/// database's URL).
async fn tickler(env: &TestEnv, token: &str, args: &[&str]) -> Output {
    let mut command = env.command(env!("CARGO_BIN_EXE_tickler"));
    command.args(args).env("TICKLER_TOKEN", token);
    output(command).await
}

/// Every row, newest first, read a page of `limit` at a time.
async fn audit_all(env: &TestEnv, filter: &str, limit: u32) -> Vec<Value> {
    let mut rows = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/audit?limit={limit}{filter}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = env.get(&path).await;
        assert_eq!(status, 200, "{page}");
        rows.extend(page["entries"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return rows,
        }
    }
}

fn of<'a>(rows: &'a [Value], action: &str) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["action"] == action).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_control_plane_change_says_who_what_and_from_where() {
    let env = TestEnv::start().await;
    let url = env.config.mysql.url.clone();
    let ops = http_with_token(&token_create(&url, "ops", &["*"], &["write", "read"]).await);
    let reader = http_with_token(&token_create(&url, "reader", &["*"], &["read"]).await);
    let topic = env.topic.clone();

    // Through the API, as the token "ops".
    let call = |method: &'static str, path: String, body: Option<Value>| {
        let ops = ops.clone();
        let env = &env;
        async move {
            env.request_with(&ops, method, &path, body.map(|b| b.to_string()))
                .await
        }
    };
    let (status, _) = call("POST", format!("/v1/topics/{topic}/pause"), None).await;
    assert_eq!(status, 200);
    let (status, _) = call(
        "PATCH",
        format!("/v1/topics/{topic}"),
        Some(json!({"max_per_second": 300})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call("POST", format!("/v1/topics/{topic}/resume"), None).await;
    assert_eq!(status, 200);
    let (status, schedule) = call(
        "POST",
        "/v1/schedules".to_owned(),
        Some(
            json!({"topic": topic, "key": "renewal", "every_ms": 3_600_000,
                    "payload": {"card": "4111 1111 1111 1111"}}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{schedule}");
    let schedule_id = schedule["id"].as_u64().unwrap();
    let (status, _) = call(
        "PATCH",
        format!("/v1/schedules/{schedule_id}"),
        Some(json!({"version": schedule["version"], "every_ms": 7_200_000})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(
        "POST",
        "/v1/jobs/bulk".to_owned(),
        Some(json!({"filter": {"topic": topic, "status": "pending"},
                    "action": {"type": "cancel"}, "dry_run": true})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(
        "DELETE",
        format!("/v1/schedules/{schedule_id}?occurrences=cancel"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    // Refused for its scope: recorded, with the refusal.
    let (status, _) = env
        .request_with(&reader, "POST", &format!("/v1/topics/{topic}/pause"), None)
        .await;
    assert_eq!(status, 403);
    // Reading is not a change.
    let _ = env.get(&format!("/v1/topics/{topic}")).await;

    // Through the CLI: a token made and revoked.
    let made = tickler(
        &env,
        "",
        &[
            "token",
            "create",
            "batch-svc",
            "--topics",
            "orders.*",
            "--scope",
            "write",
        ],
    )
    .await;
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let secret = String::from_utf8_lossy(&made.stdout)
        .lines()
        .last()
        .unwrap()
        .trim()
        .to_owned();
    let revoked = tickler(&env, "", &["token", "revoke", "batch-svc"]).await;
    assert!(revoked.status.success());
    let missing = tickler(&env, "", &["token", "revoke", "no-such"]).await;
    assert!(!missing.status.success());

    // Only admins read it.
    let (status, answer) = env.request_with(&ops, "GET", "/v1/audit", None).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("forbidden_scope"))
    );

    let rows = audit_all(&env, "", 3).await;
    let actions: Vec<&str> = rows.iter().map(|r| r["action"].as_str().unwrap()).collect();
    // Newest first; paging in threes saw each once.
    let ids: Vec<u64> = rows.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "no row twice: {ids:?}");
    assert_eq!(
        actions,
        [
            "token.revoke",
            "token.revoke",
            "token.create",
            "topic.pause",
            "schedule.delete",
            "bulk.preview",
            "schedule.modify",
            "schedule.create",
            "topic.resume",
            "topic.modify",
            "topic.pause",
            "instance.start",
        ],
        "{rows:#?}"
    );

    let pause = of(&rows, "topic.pause")[1];
    assert_eq!(pause["actor"], "api:ops");
    assert_eq!(pause["target"], topic.as_str());
    assert_eq!(pause["origin"], "127.0.0.1");
    assert_eq!(pause["status"], 200);
    assert_eq!(
        (&pause["before"]["paused"], &pause["after"]["paused"]),
        (&json!(false), &json!(true))
    );
    let pace = of(&rows, "topic.modify")[0];
    assert_eq!(pace["request"], json!({"max_per_second": 300}));
    assert!(pace["before"]["max_per_second"].is_null() && pace["after"]["max_per_second"] == 300);
    let refused = of(&rows, "topic.pause")[0];
    assert_eq!(
        (&refused["actor"], &refused["status"]),
        (&json!("api:reader"), &json!(403))
    );
    assert_eq!(refused["after"]["error"]["code"], "forbidden_scope");

    let created = of(&rows, "schedule.create")[0];
    assert_eq!(created["target"], format!("{topic}/renewal"));
    assert_eq!(created["request"]["payload"], "<left out>");
    let modified = of(&rows, "schedule.modify")[0];
    assert_eq!(modified["target"], schedule_id.to_string());
    assert_eq!(modified["before"]["every_ms"], 3_600_000);
    assert_eq!(modified["after"]["schedule"]["every_ms"], 7_200_000);
    assert_eq!(of(&rows, "bulk.preview")[0]["target"], topic.as_str());

    let token = of(&rows, "token.create")[0];
    assert_eq!(
        (&token["actor"], &token["target"]),
        (&json!("cli"), &json!("batch-svc"))
    );
    assert_eq!(token["after"]["scopes"], json!(["write"]));
    assert!(
        token["origin"].as_str().unwrap().contains("(pid "),
        "{token}"
    );
    let failed = of(&rows, "token.revoke")[0];
    assert_eq!(
        (&failed["target"], &failed["status"]),
        (&json!("no-such"), &json!(0))
    );
    let start = of(&rows, "instance.start")[0];
    assert!(
        start["after"]["mysql"]["url"]
            .as_str()
            .unwrap()
            .contains("***"),
        "{start}"
    );

    let text = rows.iter().map(Value::to_string).collect::<String>();
    assert!(!text.contains("4111"), "no payload in the audit log");
    assert!(!text.contains(&secret), "no secret in the audit log");
    assert!(
        !text.contains(&env.admin_secret),
        "no secret in the audit log"
    );

    // Filters: a kind, an actor, a target.
    let topics = audit_all(&env, "&action=topic", 100).await;
    assert_eq!(topics.len(), 4);
    let by_ops = audit_all(&env, "&actor=api:ops", 100).await;
    assert_eq!(by_ops.len(), 7);
    let (status, answer) = env.get("/v1/audit?cursor=forged").await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );

    // `tickler audit` shows them.
    let shown = tickler(&env, &env.admin_secret, &["audit", "--action", "token"]).await;
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("token.create")
            && shown.contains("failed")
            && !shown.contains("topic.pause"),
        "{shown}"
    );
    env.finish().await;
}

/// A change whose row cannot be written is not made: 503, and the topic
/// stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_cannot_be_recorded_is_not_made() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    sqlx::query("RENAME TABLE audit_log TO audit_log_away")
        .execute(&env.sql)
        .await
        .unwrap();
    let (status, answer) = env
        .post(&format!("/v1/topics/{topic}/pause"), json!({}))
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (503, Some("unavailable"))
    );
    sqlx::query("RENAME TABLE audit_log_away TO audit_log")
        .execute(&env.sql)
        .await
        .unwrap();
    let (_, view) = env.get(&format!("/v1/topics/{topic}")).await;
    assert_eq!(view["paused"], false, "nothing changed: {view}");

    // And old rows are purged after audit.retention_days.
    sqlx::query(
        "INSERT INTO audit_log (at, actor, action) VALUES \
         (TIMESTAMPADD(DAY, -401, UTC_TIMESTAMP(3)), 'sql', 'topic.pause')",
    )
    .execute(&env.sql)
    .await
    .unwrap();
    let purged = env
        .store
        .audit_purge(Duration::from_secs(400 * 86_400), 100)
        .await
        .unwrap();
    assert_eq!(purged, 1, "the old row, and only it");
    env.finish().await;
}

/// An audited answer larger than what the row keeps still reaches the
/// caller whole: a schedule with a payload near the 1 MiB limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_answer_reaches_the_caller_whole() {
    let env = TestEnv::start().await;
    let payload = "x".repeat(1_040_000);
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": env.topic, "key": "big", "every_ms": 3_600_000, "payload": payload}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    assert_eq!(schedule["payload"].as_str().map(str::len), Some(1_040_000));
    let rows = audit_all(&env, "&action=schedule.create", 10).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], 201);
    env.finish().await;
}
