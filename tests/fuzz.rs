//! Random requests against the API, as a hostile caller sends them: random
//! methods, paths, query strings, headers and bodies (well-formed JSON of
//! the API's own field names with values of every type, and broken text).
//! Every request must get an answer (no dropped connection), none a 5xx,
//! and a refused request must write nothing.
//!
//! Runs `TICKLER_FUZZ_SECONDS` (default 30) with a seed printed first;
//! `TICKLER_FUZZ_SEED=<n>` replays a run.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Map, Value};
use tickler::config::Role;
use tickler_testkit::TestEnv;

const FIELDS: &[&str] = &[
    "topic",
    "key",
    "payload",
    "payload_base64",
    "headers",
    "run_at",
    "delay_ms",
    "expects_result",
    "max_attempts",
    "backoff_base_ms",
    "backoff_cap_ms",
    "ack_timeout_ms",
    "version",
    "attempt",
    "outcome",
    "error",
    "retry_after_ms",
    "job_id",
    "jobs",
    "surprise",
];

const QUERY_NAMES: &[&str] = &[
    "topic",
    "status",
    "key",
    "run_at_from",
    "run_at_to",
    "limit",
    "cursor",
    "other",
];

struct Fuzzer {
    rng: StdRng,
    topic: String,
    ids: Vec<u64>,
}

impl Fuzzer {
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.rng.random_range(0..items.len())]
    }

    fn text(&mut self) -> String {
        let pieces = [
            "a",
            " ",
            "é",
            "\u{0}",
            "\u{1F600}",
            "%",
            "/",
            "..",
            "+",
            "-",
            "0",
            "9",
            "\"",
            "\\",
            "'",
            "\n",
            "{",
            "[",
            "tickler-",
            "__",
            "x",
        ];
        let len = match self.rng.random_range(0..10) {
            0 => 0,
            1 => self.rng.random_range(200..2_000),
            _ => self.rng.random_range(1..12),
        };
        (0..len).map(|_| *self.pick(&pieces)).collect()
    }

    /// An RFC 3339-looking time, biased to the edges: years 0000 and 9999,
    /// the epoch, offsets that move a time across a year boundary, and now
    /// and then a field out of range.
    fn time(&mut self) -> String {
        if self.rng.random_range(0..4) == 0 {
            // Times at the ends of what a DATETIME and the epoch hold, some
            // of them moved past the end by their offset.
            let edges = [
                "0000-01-01T00:00:00+00:01",
                "0000-01-01T00:00:00+23:59",
                "9999-12-31T23:59:59.999-00:01",
                "1969-12-31T23:59:59.999Z",
                "1970-01-01T00:00:00Z",
                "9999-12-31T23:59:59.999Z",
            ];
            return self.pick(&edges).to_string();
        }
        let year = match self.rng.random_range(0..4) {
            0 => *self.pick(&[0, 1, 999, 1000, 1969, 1970, 9999]),
            1 => self.rng.random_range(0..=9999),
            _ => self.rng.random_range(2020..=2040),
        };
        let edge = self.rng.random_range(0..3) == 0;
        let (month, day) = if edge {
            (*self.pick(&[1, 12]), *self.pick(&[1, 31]))
        } else {
            (self.rng.random_range(1..=12), self.rng.random_range(1..=28))
        };
        let (month, day) = match self.rng.random_range(0..20) {
            0 => (self.rng.random_range(0..=13), self.rng.random_range(0..=32)),
            _ => (month, day),
        };
        let offset = match self.rng.random_range(0..4) {
            0 | 1 => "Z".to_owned(),
            2 => format!(
                "{}{:02}:{:02}",
                if self.rng.random() { '+' } else { '-' },
                self.rng.random_range(0..24),
                self.rng.random_range(0..60)
            ),
            _ => String::new(),
        };
        let (hour, minute) = if edge {
            (*self.pick(&[0, 23]), *self.pick(&[0, 59]))
        } else {
            (self.rng.random_range(0..24), self.rng.random_range(0..60))
        };
        format!(
            "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{:02}.{:03}{offset}",
            self.rng.random_range(0..60),
            self.rng.random_range(0..1000)
        )
    }

    fn number(&mut self) -> Value {
        match self.rng.random_range(0..6) {
            0 => json!(self.rng.random::<i64>()),
            1 => json!(self.rng.random::<u64>()),
            2 => json!(self.rng.random_range(-2i64..5_000)),
            3 => json!(self.rng.random::<f64>() * 1e30),
            4 => serde_json::from_str("123456789012345678901234567890").unwrap(),
            _ => json!(0),
        }
    }

    fn value(&mut self, depth: u32) -> Value {
        match self.rng.random_range(0..if depth > 3 { 6 } else { 9 }) {
            0 => Value::Null,
            1 => json!(self.rng.random::<bool>()),
            2 | 3 => self.number(),
            4 => json!(self.text()),
            5 => json!(self.time()),
            6 => {
                let n = self.rng.random_range(0..4);
                Value::Array((0..n).map(|_| self.value(depth + 1)).collect())
            }
            7 => {
                let n = self.rng.random_range(0..4);
                let mut map = Map::new();
                for _ in 0..n {
                    let name = if self.rng.random() {
                        self.pick(FIELDS).to_string()
                    } else {
                        self.text()
                    };
                    map.insert(name, self.value(depth + 1));
                }
                Value::Object(map)
            }
            _ => {
                let depth = self.rng.random_range(1..300);
                serde_json::from_str(&format!("{}{}", "[".repeat(depth), "]".repeat(depth)))
                    .unwrap_or(Value::Null)
            }
        }
    }

    /// A body made of the API's field names, mostly plausible values.
    fn job_body(&mut self) -> Value {
        let mut body = Map::new();
        for field in FIELDS {
            if self.rng.random_range(0..3) != 0 {
                continue;
            }
            let value = match (*field, self.rng.random_range(0..3)) {
                ("topic", 0 | 1) => json!(if self.rng.random() {
                    self.topic.clone()
                } else {
                    self.text()
                }),
                ("delay_ms", 0 | 1) => json!(self.rng.random_range(0..86_400_000u64)),
                ("run_at", 0 | 1) => json!(self.time()),
                ("payload", 0) => self.value(0),
                ("payload_base64", 0) => json!("AAECAw=="),
                ("headers", 0) => json!({"h": self.text()}),
                ("outcome", 0) => json!(*self.pick(&["ok", "retry", "failed", "maybe"])),
                ("version" | "attempt" | "job_id", 0) => json!(self.pick(&self.ids.clone())),
                ("jobs", 0 | 1) => {
                    let n = self.rng.random_range(0..5);
                    Value::Array((0..n).map(|_| self.job_body()).collect())
                }
                _ => self.value(0),
            };
            body.insert(field.to_string(), value);
        }
        Value::Object(body)
    }

    fn path(&mut self) -> String {
        let id = match self.rng.random_range(0..8) {
            0 => "0".to_owned(),
            1 => format!("+{}", self.pick(&self.ids.clone())),
            2 => "%FF%FE".to_owned(),
            3 => u64::MAX.to_string() + "0",
            4 => urlencode(&self.text()),
            _ => self.pick(&self.ids.clone()).to_string(),
        };
        let base = match self.rng.random_range(0..12) {
            0..=2 => "/v1/jobs".to_owned(),
            3 => "/v1/jobs/batch".to_owned(),
            4 | 5 => format!("/v1/jobs/{id}"),
            6 => format!("/v1/jobs/{id}/history"),
            7 => format!("/v1/jobs/{id}/result"),
            8 => format!("/v1/jobs/{id}/redrive"),
            9 => "/healthz".to_owned(),
            10 => format!("/{}", urlencode(&self.text())),
            _ => format!("/v1/jobs/{id}/{}", urlencode(&self.text())),
        };
        if self.rng.random_range(0..3) != 0 {
            return base;
        }
        let n = self.rng.random_range(1..4);
        let query: Vec<String> = (0..n)
            .map(|_| {
                let name = *self.pick(QUERY_NAMES);
                let value = match self.rng.random_range(0..4) {
                    0 => self.time(),
                    1 => self.topic.clone(),
                    2 => self.rng.random::<u32>().to_string(),
                    _ => self.text(),
                };
                format!("{name}={}", urlencode(&value))
            })
            .collect();
        format!("{base}?{}", query.join("&"))
    }

    fn body(&mut self) -> Option<String> {
        match self.rng.random_range(0..8) {
            0 => None,
            1 => Some(self.text()),
            2 => {
                let mut text = self.job_body().to_string();
                let mut cut = self.rng.random_range(0..=text.len());
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                Some(text)
            }
            _ => Some(self.job_body().to_string()),
        }
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~:".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// What a refused request must leave untouched.
async fn fingerprint(env: &TestEnv) -> (i64, i64, String) {
    sqlx::query_as(
        "SELECT COUNT(*), CAST(COALESCE(SUM(version), 0) AS SIGNED), \
         COALESCE(CAST(MAX(updated_at) AS CHAR), '') FROM jobs",
    )
    .fetch_one(&env.sql)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_requests_get_answers_never_a_5xx_and_refusals_write_nothing() {
    let seconds: u64 = std::env::var("TICKLER_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let seed: u64 = std::env::var("TICKLER_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("fuzz seed {seed} (TICKLER_FUZZ_SEED={seed} replays), {seconds} s");
    // The API alone: no other role writes rows behind the checks' back.
    let env = TestEnv::start_with(|c| c.roles = vec![Role::Api]).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let job = env
            .job_create(json!({"payload": n, "delay_ms": 3_600_000}))
            .await;
        ids.push(job["id"].as_u64().unwrap());
    }
    let mut fuzzer = Fuzzer {
        rng: StdRng::seed_from_u64(seed),
        topic: env.topic.clone(),
        ids,
    };
    // With tokens on, as deployed: the fuzzer holds an admin token.
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {}", env.admin_secret).parse().unwrap(),
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .default_headers(auth)
        .build()
        .unwrap();
    let methods = [
        "GET", "POST", "POST", "PATCH", "DELETE", "PUT", "OPTIONS", "HEAD",
    ];
    let content_types = [
        "application/json",
        "application/json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/json; charset=utf-8",
    ];
    let started = Instant::now();
    let mut before = fingerprint(&env).await;
    let (mut sent, mut refused) = (0u64, 0u64);
    while started.elapsed() < Duration::from_secs(seconds) {
        let method = *fuzzer.pick(&methods);
        let path = fuzzer.path();
        let body = fuzzer.body();
        let mut request = http.request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{path}", env.base_url),
        );
        if let Some(body) = &body {
            request = request
                .header("content-type", *fuzzer.pick(&content_types))
                .body(body.clone());
        }
        let what = format!("{method} {path} {:.300?} (seed {seed})", body);
        let response = match request.send().await {
            Ok(response) => response,
            Err(err) => panic!("no answer to {what}: {err}"),
        };
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        sent += 1;
        assert!(status < 500, "{status} for {what}: {text:.500}");
        let after = fingerprint(&env).await;
        if status >= 400 {
            refused += 1;
            assert_eq!(
                before, after,
                "{status} wrote to jobs for {what}: {text:.300}"
            );
            if method != "HEAD" {
                let reply: Value = serde_json::from_str(&text).unwrap_or_else(|_| {
                    panic!("{status} without a JSON body for {what}: {text:.300}")
                });
                assert!(
                    reply["error"]["code"].is_string(),
                    "{status} without an error code for {what}: {text:.300}"
                );
            }
        }
        before = after;
    }
    println!("fuzz: {sent} requests, {refused} refused, seed {seed}");
    assert!(sent > 100, "the fuzzer ran: {sent} requests");
    env.finish().await;
}
