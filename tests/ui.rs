//! The dashboard at `/ui`, driven in a real headless Chromium against a real
//! tickler: a wrong token is refused with the API's `code: message` and the
//! admin token signs in; the overview counts the test topic's jobs by
//! status and lists its dead job; Redrive (after its confirm dialog) brings
//! that job back, as MySQL and its history show; the job's page shows that
//! history, and a topic + key lookup finds a job; a bulk cancel is
//! previewed (matching exactly the jobs its filter names), applied,
//! followed to `done`, and found in MySQL; a schedule is paused and resumed
//! from its row, and a topic paused by name and resumed from the list, each
//! as the API then says. A read-only token scoped to one topic pattern
//! sees its topic's page: the jobs due ahead against the topic's pace, and
//! the API's refusal for another topic. The page itself is three files
//! served without a token and referring to nothing outside tickler.
//!
//! Screenshots of each page go to `docs/ui/` when `TICKLER_UI_SCREENSHOTS`
//! is set (to refresh the documentation), else to a scratch directory.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use tickler_testkit::procs::scratch_dir;
use tickler_testkit::webdriver::Browser;
use tickler_testkit::{eventually, unique, TestEnv};

/// How long the page may take to show something: the overview refreshes
/// every 5 s.
const WAIT: Duration = Duration::from_secs(15);

fn screenshot_dir() -> PathBuf {
    if std::env::var_os("TICKLER_UI_SCREENSHOTS").is_some() {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/ui")
    } else {
        scratch_dir()
    }
}

/// `#bulk-form`'s field `name`.
fn bulk_field(name: &str) -> String {
    format!("#bulk-form [name=\"{name}\"]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_signs_in_redrives_a_dead_job_shows_history_and_bulk_cancels() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    // Due in an hour: pending for the whole test, never dispatched.
    let mut later = Vec::new();
    for i in 1..=4 {
        let job = env
            .job_create(
                json!({"key": format!("later-{i}"), "payload": {"n": i}, "delay_ms": 3_600_000}),
            )
            .await;
        later.push(job["id"].as_u64().unwrap());
    }
    // Made dead by hand, as an operator's SQL would (its history: `sql`).
    let doomed = env
        .job_create(json!({"key": "doomed-1", "payload": {"n": 0}, "delay_ms": 3_600_000}))
        .await["id"]
        .as_u64()
        .unwrap();
    sqlx::query(
        "UPDATE jobs SET status = 'dead', last_error = 'consumer said: upstream 503' WHERE id = ?",
    )
    .bind(doomed)
    .execute(&env.sql)
    .await
    .unwrap();
    env.history_await(doomed, "sql", "dead", Duration::from_secs(10))
        .await;

    // A few sent already, so the overview has lateness to chart.
    let mut sent = Vec::new();
    for i in 0..20 {
        let job = env
            .job_create(
                json!({"key": format!("now-{i}"), "payload": {"n": i}, "delay_ms": 100 * i}),
            )
            .await;
        sent.push(job["id"].as_u64().unwrap());
    }
    for id in &sent {
        env.status_await(*id, "dispatched", Duration::from_secs(20))
            .await;
    }

    let shots = screenshot_dir();
    let browser = Browser::start()
        .await
        .expect("chromium and chromedriver run (scripts/services installs them)");
    let ui = format!("{}/ui", env.base_url);

    // No token yet: the sign-in form, without an error. A wrong secret is
    // refused with the API's error; the admin's is taken.
    browser.goto(&ui).await.unwrap();
    browser
        .wait_for("#signin-form", |_| true, WAIT)
        .await
        .unwrap();
    let problem = browser.find("#signin-error").await.unwrap();
    assert_eq!(browser.text(&problem).await.unwrap(), "");
    let token = browser.find("#token").await.unwrap();
    browser.send_keys(&token, "tkl_not-a-token").await.unwrap();
    browser
        .click(&browser.find("#signin").await.unwrap())
        .await
        .unwrap();
    browser
        .wait_for("#signin-error", |t| t.starts_with("unauthorized: "), WAIT)
        .await
        .unwrap();
    // The form was drawn again: find its input afresh.
    let token = browser.find("#token").await.unwrap();
    browser.send_keys(&token, &env.admin_secret).await.unwrap();
    browser
        .click(&browser.find("#signin").await.unwrap())
        .await
        .unwrap();

    // Overview: the topic's counts from /v1/stats, and the dead job.
    let count =
        |status: &str| format!("#counts td[data-topic=\"{topic}\"][data-status=\"{status}\"]");
    browser
        .wait_for(&count("pending"), |t| t == "4", WAIT)
        .await
        .unwrap();
    browser
        .wait_for(&count("dead"), |t| t == "1", WAIT)
        .await
        .unwrap();
    let redrive = format!("#dead button[data-action=\"redrive\"][data-job=\"{doomed}\"]");
    let button = browser
        .wait_for(&redrive, |t| t == "Redrive", WAIT)
        .await
        .unwrap();
    browser
        .wait_for("#lateness svg", |_| true, WAIT)
        .await
        .unwrap();
    browser
        .screenshot(&shots.join("overview.png"))
        .await
        .unwrap();
    // A quota on the signed-in token: the overview shows what it holds of it
    // (once every instance has read the token again, at the next refresh).
    sqlx::query("UPDATE api_tokens SET max_pending_jobs = 1000 WHERE name = 'test-admin'")
        .execute(&env.sql)
        .await
        .unwrap();
    browser
        .wait_for(
            "#card-quota",
            |t| t.to_lowercase().contains("quota of test-admin") && t.contains("of 1,000 jobs"),
            Duration::from_secs(30),
        )
        .await
        .unwrap();

    // Redrive: confirm, then the job leaves `dead` in MySQL, by the API.
    browser.click(&button).await.unwrap();
    let question = browser.alert_text().await.unwrap();
    assert!(
        question.contains(&format!("Redrive dead job {doomed}")),
        "{question}"
    );
    browser.accept_alert().await.unwrap();
    browser
        .wait_for(
            "#flash",
            |t| t.contains(&format!("job {doomed} redriven")),
            WAIT,
        )
        .await
        .unwrap();
    let status = eventually(Duration::from_secs(10), || async {
        let status = env.job_status(doomed).await;
        (status != "dead").then_some(status)
    })
    .await
    .expect("the redrive reached MySQL within 10 s");
    // Pending now, so the dispatcher may already have taken it further.
    assert!(
        ["pending", "dispatching", "dispatched", "succeeded"].contains(&status.as_str()),
        "job {doomed} is {status} after its redrive"
    );
    let (code, history) = env.get(&format!("/v1/jobs/{doomed}/history")).await;
    assert_eq!(code, 200, "{history}");
    let changes: Vec<(&str, &str)> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap_or_default(),
                e["status"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    // The hand edit, then the redrive made with the test's admin token.
    let redriven = changes
        .windows(2)
        .any(|pair| pair[0] == ("sql", "dead") && pair[1] == ("api:test-admin", "pending"));
    assert!(redriven, "history of job {doomed}: {changes:?}");

    // The job's page: its fields and its history, the hand edit included.
    browser.goto(&format!("{ui}#/jobs/{doomed}")).await.unwrap();
    browser
        .wait_for(
            "#history",
            |t| t.contains("sql") && t.contains("api:test-admin"),
            WAIT,
        )
        .await
        .unwrap();
    let events = browser.find_all("#history li").await.unwrap();
    assert!(events.len() >= 3, "{} events shown", events.len());
    browser
        .find("#history li[data-actor=\"sql\"][data-status=\"dead\"]")
        .await
        .expect("the hand edit is on the timeline");
    browser
        .wait_for("#job [data-field=\"key\"]", |t| t == "doomed-1", WAIT)
        .await
        .unwrap();
    browser.screenshot(&shots.join("job.png")).await.unwrap();

    // A lookup by topic and key, from the same page (the id box cleared).
    browser
        .clear(&browser.find("#lookup-form [name=\"id\"]").await.unwrap())
        .await
        .unwrap();
    browser
        .send_keys(
            &browser.find("#lookup-form [name=\"topic\"]").await.unwrap(),
            &topic,
        )
        .await
        .unwrap();
    browser
        .send_keys(
            &browser.find("#lookup-form [name=\"key\"]").await.unwrap(),
            "later-1",
        )
        .await
        .unwrap();
    browser
        .click(&browser.find("#lookup").await.unwrap())
        .await
        .unwrap();
    let title = format!("Job {}", later[0]);
    browser
        .wait_for("#job-title", |t| t == title, WAIT)
        .await
        .unwrap();
    browser
        .find(&format!(
            "#job button[data-action=\"cancel\"][data-job=\"{}\"]",
            later[0]
        ))
        .await
        .expect("a pending job offers Cancel");

    // Bulk: preview a cancel of the `later-` jobs, apply it, follow it.
    browser.goto(&format!("{ui}#/bulk")).await.unwrap();
    let topic_field = browser
        .wait_for(&bulk_field("topic"), |_| true, WAIT)
        .await
        .unwrap();
    browser.send_keys(&topic_field, &topic).await.unwrap();
    let pending = format!("{} option[value=\"pending\"]", bulk_field("status"));
    browser
        .click(&browser.find(&pending).await.unwrap())
        .await
        .unwrap();
    browser
        .send_keys(
            &browser.find(&bulk_field("key_prefix")).await.unwrap(),
            "later-",
        )
        .await
        .unwrap();
    let cancel = format!("{} option[value=\"cancel\"]", bulk_field("action"));
    browser
        .click(&browser.find(&cancel).await.unwrap())
        .await
        .unwrap();
    browser
        .click(&browser.find("#bulk-preview").await.unwrap())
        .await
        .unwrap();
    browser
        .wait_for("#bulk-matched", |t| t == "4", WAIT)
        .await
        .unwrap();
    let sample = browser.find_all("#bulk-sample tbody tr").await.unwrap();
    assert!(!sample.is_empty(), "the preview shows a sample");
    for row in &sample {
        let id = browser.attribute(row, "data-job").await.unwrap();
        let id: u64 = id.as_deref().unwrap_or_default().parse().unwrap();
        assert!(later.contains(&id), "job {id} is not one of {later:?}");
    }
    // A preview changes nothing.
    for id in &later {
        assert_eq!(env.job_status(*id).await, "pending");
    }

    browser
        .click(&browser.find("#bulk-apply").await.unwrap())
        .await
        .unwrap();
    let question = browser.alert_text().await.unwrap();
    assert!(question.contains("the 4 matched jobs"), "{question}");
    browser.accept_alert().await.unwrap();
    browser
        .wait_for(
            "#bulk-status",
            |t| t == "done" || t == "failed",
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let numbers = browser
        .text(&browser.find("#bulk-numbers").await.unwrap())
        .await
        .unwrap();
    let status = browser
        .text(&browser.find("#bulk-status").await.unwrap())
        .await
        .unwrap();
    assert_eq!(status, "done", "{numbers}");
    assert!(
        numbers.starts_with("4 / 4") && numbers.contains("changed 4"),
        "{numbers}"
    );
    assert!(
        browser.url().await.unwrap().contains("#/bulk/"),
        "the address names the operation"
    );
    browser.screenshot(&shots.join("bulk.png")).await.unwrap();
    let cancelled = eventually(Duration::from_secs(10), || async {
        for id in &later {
            if env.job_status(*id).await != "cancelled" {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(cancelled.is_some(), "jobs {later:?} are not all cancelled");
    assert_ne!(env.job_status(doomed).await, "cancelled");

    drop(browser);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedules_topics_forecast_and_audit_pages_work() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let (status, schedule) = env
        .post(
            "/v1/schedules",
            json!({"topic": topic, "key": "renewal", "cron": "0 9 1 * *", "time_zone": "Europe/Berlin"}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_u64().unwrap();

    let shots = screenshot_dir();
    let browser = Browser::start()
        .await
        .expect("chromium and chromedriver run (scripts/services installs them)");
    let ui = format!("{}/ui", env.base_url);
    browser.goto(&ui).await.unwrap();
    let token = browser.wait_for("#token", |_| true, WAIT).await.unwrap();
    browser.send_keys(&token, &env.admin_secret).await.unwrap();
    browser
        .click(&browser.find("#signin").await.unwrap())
        .await
        .unwrap();
    browser
        .wait_for("#stats-body", |_| true, WAIT)
        .await
        .unwrap();

    // Schedules: the row, then Pause (after its confirm) reaches MySQL.
    browser.goto(&format!("{ui}#/schedules")).await.unwrap();
    let row = format!("#schedules tr[data-schedule=\"{id}\"]");
    browser
        .wait_for(
            &row,
            |t| t.contains("0 9 1 * * (Europe/Berlin)") && t.contains("active"),
            WAIT,
        )
        .await
        .unwrap();
    browser
        .screenshot(&shots.join("schedules.png"))
        .await
        .unwrap();
    let pause = browser
        .find(&format!("{row} button[data-action=\"pause\"]"))
        .await
        .unwrap();
    browser.click(&pause).await.unwrap();
    assert!(browser
        .alert_text()
        .await
        .unwrap()
        .contains(&format!("Pause schedule {id}")));
    browser.accept_alert().await.unwrap();
    browser
        .wait_for(&format!("{row}[data-status=\"paused\"]"), |_| true, WAIT)
        .await
        .unwrap();
    let (_, paused) = env.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(paused["status"], "paused");
    browser
        .click(
            &browser
                .find(&format!("{row} button[data-action=\"resume\"]"))
                .await
                .unwrap(),
        )
        .await
        .unwrap();
    browser
        .wait_for(&format!("{row}[data-status=\"active\"]"), |_| true, WAIT)
        .await
        .unwrap();

    // Topics: pause one by name, see it listed, resume it from its row.
    browser.goto(&format!("{ui}#/topics")).await.unwrap();
    browser
        .wait_for("#topics-empty", |_| true, WAIT)
        .await
        .unwrap();
    let name = browser.find("#pause-form [name=\"topic\"]").await.unwrap();
    browser.send_keys(&name, &topic).await.unwrap();
    browser
        .click(&browser.find("#pause-topic").await.unwrap())
        .await
        .unwrap();
    browser.accept_alert().await.unwrap();
    let topic_row = format!("#topics tr[data-topic=\"{topic}\"]");
    browser
        .wait_for(
            &format!("{topic_row}[data-paused=\"true\"]"),
            |t| t.contains("api:test-admin"),
            WAIT,
        )
        .await
        .unwrap();
    let (_, view) = env.get(&format!("/v1/topics/{topic}")).await;
    assert_eq!(view["paused"], true);
    browser.screenshot(&shots.join("topics.png")).await.unwrap();
    browser
        .click(
            &browser
                .find(&format!("{topic_row} button[data-action=\"resume\"]"))
                .await
                .unwrap(),
        )
        .await
        .unwrap();
    browser
        .wait_for("#topics-empty", |_| true, WAIT)
        .await
        .unwrap();
    let (_, view) = env.get(&format!("/v1/topics/{topic}")).await;
    assert_eq!(view["paused"], false);

    // Forecast: three jobs due in two hours drawn as a bar, and the topic's
    // totals beneath (the schedule's next occurrence is a month or less away,
    // beyond the next 24 hours unless it is the 1st).
    for n in 0..3 {
        env.job_create(json!({"payload": n, "delay_ms": 7_200_000}))
            .await;
    }
    browser.goto(&format!("{ui}#/forecast")).await.unwrap();
    browser
        .wait_for("#forecast-chart rect.bar", |_| true, WAIT)
        .await
        .unwrap();
    browser
        .wait_for(
            "#forecast-topics",
            |t| t.contains(&topic) && t.contains('3'),
            WAIT,
        )
        .await
        .unwrap();
    browser
        .screenshot(&shots.join("forecast.png"))
        .await
        .unwrap();

    // Audit: the pause and resume made above, by the admin's token, from
    // this browser.
    browser
        .goto(&format!("{ui}#/audit?action=topic"))
        .await
        .unwrap();
    browser
        .wait_for(
            "#audit-table",
            |t| {
                t.contains("topic.pause")
                    && t.contains("topic.resume")
                    && t.contains("api:test-admin")
                    && t.contains(&topic)
                    && !t.contains("schedule.pause")
            },
            WAIT,
        )
        .await
        .unwrap();
    browser.screenshot(&shots.join("audit.png")).await.unwrap();

    drop(browser);
    env.finish().await;
}

/// A consumer team's view of its topic: a token with only `read`, scoped
/// to the test's topic pattern, opens `#/topics/{topic}` from the topics
/// list and sees the topic's pace and the jobs due in the next hour, by the
/// minute, with the pace's capacity per minute drawn across; every request
/// the page made was a GET it was allowed. A topic outside the token's
/// pattern shows the API's 403 in the page's error line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_token_sees_its_topics_forecast_against_the_pace() {
    let env = TestEnv::start().await;
    let topic = env.topic.clone();
    let path = format!("/v1/topics/{topic}");

    // A pace of 1 a second: 60 a minute.
    let (status, paced) = env
        .request(
            "PATCH",
            &path,
            Some(json!({"max_per_second": 1}).to_string()),
        )
        .await;
    assert_eq!(status, 200, "{paced}");

    // 80 jobs half-way through the minute 20 minutes ahead (more than the
    // pace lets out in it: 20 left over, 20 s at 1 a second), and 5 more
    // spread over the next half hour.
    let now = chrono::Utc::now().timestamp();
    let minute = chrono::DateTime::from_timestamp(now - now % 60 + 20 * 60, 0).unwrap();
    let burst_at = (minute + chrono::Duration::seconds(30))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let burst: Vec<_> = (0..80)
        .map(|i| json!({"topic": topic, "key": format!("burst-{i}"), "payload": i, "run_at": burst_at}))
        .collect();
    let (status, created) = env.post("/v1/jobs/batch", json!({"jobs": burst})).await;
    assert_eq!(status, 200, "{created}");
    let results = created["results"].as_array().unwrap();
    assert!(
        results.iter().all(|r| r["result"] == "created"),
        "{created}"
    );
    for i in 0..5u64 {
        env.job_create(
            json!({"key": format!("later-{i}"), "payload": i, "delay_ms": 1_800_000 + i * 300_000}),
        )
        .await;
    }
    let due = 85;

    // Read only, on topics of the test's pattern (the test's topic is one).
    let pattern = format!("{topic}*");
    let secret =
        tickler_testkit::token_create(&env.config.mysql.url, "team", &[&pattern], &["read"]).await;
    let elsewhere = unique("elsewhere-");

    let shots = screenshot_dir();
    let browser = Browser::start()
        .await
        .expect("chromium and chromedriver run (scripts/services installs them)");
    let ui = format!("{}/ui", env.base_url);
    browser.goto(&ui).await.unwrap();
    let token = browser.wait_for("#token", |_| true, WAIT).await.unwrap();
    browser.send_keys(&token, &secret).await.unwrap();
    browser
        .click(&browser.find("#signin").await.unwrap())
        .await
        .unwrap();
    browser
        .wait_for("#stats-body", |_| true, WAIT)
        .await
        .unwrap();

    // From here every request the page makes is recorded with its answer.
    browser
        .execute(
            "window.seen = [];
             const sent = window.fetch;
             window.fetch = async function (path, init) {
               const entry = {method: (init && init.method) || 'GET', path: String(path), status: null};
               window.seen.push(entry);
               const response = await sent.call(this, path, init);
               entry.status = response.status;
               return response;
             };
             location.hash = '#/topics';",
            &[],
        )
        .await
        .unwrap();
    // The paced topic is listed; its name opens the topic's page.
    // (The list is drawn afresh every 5 s: a link found just before may be
    // gone by the click, then it is found again.)
    let link = format!("#topics tr[data-topic=\"{topic}\"] a[data-topic-link]");
    let mut tries = 0;
    loop {
        let found = browser.wait_for(&link, |t| t == topic, WAIT).await.unwrap();
        match browser.click(&found).await {
            Err(err) if err.code() == Some("stale element reference") && tries < 3 => tries += 1,
            clicked => break clicked.unwrap(),
        }
    }
    browser
        .wait_for("#topic-title", |t| t.contains(&topic), WAIT)
        .await
        .unwrap();
    assert!(
        browser
            .url()
            .await
            .unwrap()
            .ends_with(&format!("#/topics/{topic}")),
        "the address names the topic"
    );

    // The pace, and the bars: every job due in the hour, in its minute.
    browser
        .wait_for(
            "#topic-state [data-field=\"pace\"]",
            |t| t.starts_with("1 job a second") && t.contains("set through the API"),
            WAIT,
        )
        .await
        .unwrap();
    browser
        .wait_for(
            "#topic-state [data-field=\"state\"]",
            |t| t == "running",
            WAIT,
        )
        .await
        .unwrap();
    browser
        .wait_for("#topic-chart rect.bar", |_| true, WAIT)
        .await
        .unwrap();
    let drawn = browser
        .execute(
            "const bars = [...document.querySelectorAll('#topic-chart rect.bar')];
             return {jobs: bars.reduce((n, bar) => n + Number(bar.dataset.jobs), 0),
                     most: Math.max(...bars.map((bar) => Number(bar.dataset.jobs))),
                     bars: bars.length};",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(drawn["jobs"], due, "{drawn}");
    assert_eq!(drawn["most"], 80, "{drawn}");
    assert_eq!(drawn["bars"], 6, "{drawn}");
    let total = browser.find("#topic-total").await.unwrap();
    assert_eq!(
        browser
            .attribute(&total, "data-jobs")
            .await
            .unwrap()
            .as_deref(),
        Some("85")
    );
    // The pace across the chart at what it lets out a minute.
    let line = browser.find("#topic-chart-pace").await.unwrap();
    assert_eq!(
        browser
            .attribute(&line, "data-capacity")
            .await
            .unwrap()
            .as_deref(),
        Some("60")
    );
    let label = browser.find("#topic-chart .pace-label").await.unwrap();
    assert_eq!(
        browser.text(&label).await.unwrap(),
        "pace: 1/s = 60 a minute"
    );
    // And what it makes of the busiest minute.
    let busiest = format!(
        "busiest minute: 80 jobs at {} UTC — more than the pace lets out (60): ~20 s of backlog",
        minute.format("%m-%d %H:%M")
    );
    let reading = browser.find("#topic-reading").await.unwrap();
    let said = browser.text(&reading).await.unwrap();
    assert!(said.starts_with(&busiest), "{said}");

    // Nothing was refused: no error line, and only allowed GETs were sent.
    let problem = browser.find("#topic-error").await.unwrap();
    assert_eq!(browser.text(&problem).await.unwrap(), "");
    let seen = browser.execute("return window.seen;", &[]).await.unwrap();
    let seen = seen.as_array().unwrap();
    let asked = |prefix: &str| {
        seen.iter()
            .any(|r| r["path"].as_str().unwrap().starts_with(prefix))
    };
    assert!(asked(&path) && asked("/v1/forecast?topic="), "{seen:?}");
    for request in seen {
        assert_eq!(request["method"], "GET", "{request}");
        assert_eq!(request["status"], 200, "{request}");
        assert!(
            !request["path"].as_str().unwrap().starts_with("/v1/audit"),
            "{request}"
        );
    }
    browser.screenshot(&shots.join("topic.png")).await.unwrap();

    // Another team's topic: the API's refusal, on the page.
    browser
        .execute(
            "location.hash = arguments[0];",
            &[json!(format!("#/topics/{elsewhere}"))],
        )
        .await
        .unwrap();
    browser
        .wait_for(
            "#topic-error",
            |t| t.starts_with("forbidden_topic: ") && t.contains(&elsewhere),
            WAIT,
        )
        .await
        .unwrap();
    browser
        .wait_for("#topic-title", |t| t.contains(&elsewhere), WAIT)
        .await
        .unwrap();
    assert!(
        browser.find_all("#topic-chart").await.unwrap().is_empty(),
        "no chart for a topic the token may not read"
    );

    drop(browser);
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_files_are_served_without_a_token_and_load_nothing_from_elsewhere() {
    let env = TestEnv::start().await;
    let http = reqwest::Client::new();
    let files = [
        ("/ui", "ui/index.html", "text/html"),
        ("/ui/app.js", "ui/app.js", "javascript"),
        ("/ui/style.css", "ui/style.css", "text/css"),
    ];
    for (path, file, kind) in files {
        let response = http
            .get(format!("{}{path}", env.base_url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{path}");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(content_type.contains(kind), "{path}: {content_type}");
        let body = response.text().await.unwrap();
        let source =
            std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        assert_eq!(body, source, "{path} serves {file} as built in");
        // Nothing from another origin: no CDN, no web fonts, no imports.
        for outside in [
            "src=\"http",
            "href=\"http",
            "url(",
            "@import",
            "//cdn",
            "fonts.g",
        ] {
            assert!(!body.contains(outside), "{path} refers to {outside}…");
        }
    }
    env.finish().await;
}
