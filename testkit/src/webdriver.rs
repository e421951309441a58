//! A small W3C WebDriver client for the dashboard's tests: starts
//! `chromedriver` (Debian's `chromium-driver`) on a free port, opens one
//! headless Chromium session, and drives it over HTTP with `reqwest`. Only
//! what the tests need: navigate, find by CSS, read text, click, type, run a
//! script, answer `confirm()` dialogs, take screenshots, and wait until an
//! element shows a text. Every error says which command failed and what the
//! browser answered. Dropping the [`Browser`] ends the session, chromedriver
//! and every Chromium process it started.

use std::fmt;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::procs::{free_port, scratch_dir};

/// Where Debian puts them; `TICKLER_TEST_CHROMIUM` and
/// `TICKLER_TEST_CHROMEDRIVER` point elsewhere.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The key of an element reference in W3C WebDriver answers.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How often `wait_for` and `accept_alert` look again.
const POLL: Duration = Duration::from_millis(100);

/// Chromium's switches: headless in a fresh profile. Without the
/// background-networking switches Chromium's own connections (updates,
/// sync, field trials) are refused on these machines and slow it down.
const CHROMIUM_ARGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
];

pub enum WebDriverError {
    /// chromedriver could not be run, or did not become ready.
    Start(String),
    /// chromedriver did not answer, or not with WebDriver's JSON.
    Transport { command: String, detail: String },
    /// The browser refused the command: its W3C error code and message.
    Browser {
        command: String,
        error: String,
        message: String,
    },
    /// `wait_for` ran out of time: the texts it saw last, and where.
    Timeout {
        what: String,
        seen: Vec<String>,
        url: String,
    },
}

impl WebDriverError {
    /// The W3C error code (`no such element`, `stale element reference`,
    /// `no such alert`, …) when the browser refused a command.
    pub fn code(&self) -> Option<&str> {
        match self {
            WebDriverError::Browser { error, .. } => Some(error.as_str()),
            _ => None,
        }
    }
}

impl fmt::Display for WebDriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WebDriverError::Start(detail) => write!(f, "webdriver: {detail}"),
            WebDriverError::Transport { command, detail } => {
                write!(f, "webdriver: {command}: {detail}")
            }
            WebDriverError::Browser {
                command,
                error,
                message,
            } => write!(
                f,
                "webdriver: {command}: the browser said {error}: {message}"
            ),
            WebDriverError::Timeout { what, seen, url } => write!(
                f,
                "webdriver: timed out waiting for {what} on {url}; texts seen last: {seen:?}"
            ),
        }
    }
}

/// As `Display`, so a test's `unwrap()` shows what the browser said.
impl fmt::Debug for WebDriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for WebDriverError {}

/// An element of the current page, with the selector that found it (for
/// error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    pub id: String,
    pub selector: String,
}

/// chromedriver as a child in a process group of its own, so that killing
/// the group ends Chromium's processes too. Killed when dropped.
struct Driver {
    child: Child,
    log: PathBuf,
}

impl Driver {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group's id is the leader's pid (process_group(0) at spawn).
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One headless Chromium, driven through chromedriver.
pub struct Browser {
    http: reqwest::Client,
    port: u16,
    session_id: String,
    /// `http://127.0.0.1:{port}/session/{id}`: every command's prefix.
    session_url: String,
    /// The profile and chromedriver's log (`chromedriver.log`).
    pub dir: PathBuf,
    // Dropped after `drop` below has ended the session.
    driver: Driver,
}

impl Browser {
    /// Starts chromedriver and a Chromium session with a fresh profile.
    pub async fn start() -> Result<Browser, WebDriverError> {
        let chromium =
            std::env::var("TICKLER_TEST_CHROMIUM").unwrap_or_else(|_| CHROMIUM.to_owned());
        let chromedriver =
            std::env::var("TICKLER_TEST_CHROMEDRIVER").unwrap_or_else(|_| CHROMEDRIVER.to_owned());
        let dir = scratch_dir();
        let profile = dir.join("profile");
        std::fs::create_dir_all(&profile)
            .map_err(|err| WebDriverError::Start(format!("{}: {err}", profile.display())))?;
        let log = dir.join("chromedriver.log");
        let log_file = std::fs::File::create(&log)
            .map_err(|err| WebDriverError::Start(format!("{}: {err}", log.display())))?;
        let log_err = log_file
            .try_clone()
            .map_err(|err| WebDriverError::Start(format!("{}: {err}", log.display())))?;
        let port = free_port();
        let child = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .process_group(0)
            .spawn()
            .map_err(|err| {
                WebDriverError::Start(format!(
                    "cannot run {chromedriver}: {err} (apt-get install chromium chromium-driver, \
                     as scripts/services does)"
                ))
            })?;
        let mut driver = Driver { child, log };
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|err| WebDriverError::Start(format!("an HTTP client: {err}")))?;
        let driver_url = format!("http://127.0.0.1:{port}");

        // Ready when /status says so.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = driver.child.try_wait() {
                return Err(WebDriverError::Start(format!(
                    "{chromedriver} exited ({status}):\n{}",
                    driver.log_tail()
                )));
            }
            let ready = send(
                &http,
                Method::GET,
                &format!("{driver_url}/status"),
                None,
                "status",
            )
            .await
            .ok()
            .and_then(|value| value["ready"].as_bool())
            .unwrap_or(false);
            if ready {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(WebDriverError::Start(format!(
                    "{chromedriver} is not ready on port {port} after 20 s:\n{}",
                    driver.log_tail()
                )));
            }
            tokio::time::sleep(POLL).await;
        }

        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| a.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            // A dialog stays open until the test answers it, whatever the
            // test sends meanwhile (the default would dismiss it).
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": {"binary": chromium, "args": args}
        }}});
        let session = send(
            &http,
            Method::POST,
            &format!("{driver_url}/session"),
            Some(capabilities),
            "new session",
        )
        .await
        .map_err(|err| match err {
            WebDriverError::Browser { message, .. } => WebDriverError::Start(format!(
                "Chromium ({chromium}) did not start: {message}\nchromedriver's log:\n{}",
                driver.log_tail()
            )),
            other => other,
        })?;
        let session_id = session["sessionId"]
            .as_str()
            .ok_or_else(|| WebDriverError::Transport {
                command: "new session".to_owned(),
                detail: format!("no sessionId in {session}"),
            })?
            .to_owned();
        Ok(Browser {
            http,
            port,
            session_url: format!("{driver_url}/session/{session_id}"),
            session_id,
            dir,
            driver,
        })
    }

    /// The last lines chromedriver logged, for a failing test's message.
    pub fn log_tail(&self) -> String {
        self.driver.log_tail()
    }

    async fn command(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        command: &str,
    ) -> Result<Value, WebDriverError> {
        let url = format!("{}{path}", self.session_url);
        send(&self.http, method, &url, body, command).await
    }

    /// Navigates to `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) -> Result<(), WebDriverError> {
        self.command(
            Method::POST,
            "/url",
            Some(json!({ "url": url })),
            &format!("go to {url}"),
        )
        .await
        .map(drop)
    }

    /// The current page's URL.
    pub async fn url(&self) -> Result<String, WebDriverError> {
        let value = self
            .command(Method::GET, "/url", None, "current url")
            .await?;
        Ok(value.as_str().unwrap_or_default().to_owned())
    }

    /// The first element matching CSS `selector`.
    pub async fn find(&self, selector: &str) -> Result<Element, WebDriverError> {
        let value = self
            .command(
                Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": selector})),
                &format!("find `{selector}`"),
            )
            .await?;
        element_of(&value, selector)
    }

    /// Every element matching CSS `selector`, in document order.
    pub async fn find_all(&self, selector: &str) -> Result<Vec<Element>, WebDriverError> {
        let value = self
            .command(
                Method::POST,
                "/elements",
                Some(json!({"using": "css selector", "value": selector})),
                &format!("find all `{selector}`"),
            )
            .await?;
        value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|item| element_of(item, selector))
                    .collect()
            })
            .unwrap_or_else(|| Ok(Vec::new()))
    }

    /// The element's text as rendered (hidden elements have none).
    pub async fn text(&self, element: &Element) -> Result<String, WebDriverError> {
        let value = self
            .command(
                Method::GET,
                &format!("/element/{}/text", element.id),
                None,
                &format!("text of `{}`", element.selector),
            )
            .await?;
        Ok(value.as_str().unwrap_or_default().to_owned())
    }

    /// An attribute of the element, None when it has none.
    pub async fn attribute(
        &self,
        element: &Element,
        name: &str,
    ) -> Result<Option<String>, WebDriverError> {
        let value = self
            .command(
                Method::GET,
                &format!("/element/{}/attribute/{name}", element.id),
                None,
                &format!("attribute {name} of `{}`", element.selector),
            )
            .await?;
        Ok(value.as_str().map(str::to_owned))
    }

    pub async fn click(&self, element: &Element) -> Result<(), WebDriverError> {
        self.command(
            Method::POST,
            &format!("/element/{}/click", element.id),
            Some(json!({})),
            &format!("click `{}`", element.selector),
        )
        .await
        .map(drop)
    }

    /// Types `text` into the element (an input: at the end of its value).
    pub async fn send_keys(&self, element: &Element, text: &str) -> Result<(), WebDriverError> {
        self.command(
            Method::POST,
            &format!("/element/{}/value", element.id),
            Some(json!({ "text": text })),
            &format!("type into `{}`", element.selector),
        )
        .await
        .map(drop)
    }

    /// Empties an input.
    pub async fn clear(&self, element: &Element) -> Result<(), WebDriverError> {
        self.command(
            Method::POST,
            &format!("/element/{}/clear", element.id),
            Some(json!({})),
            &format!("clear `{}`", element.selector),
        )
        .await
        .map(drop)
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the
    /// page and returns what it returns.
    pub async fn execute(&self, script: &str, args: &[Value]) -> Result<Value, WebDriverError> {
        self.command(
            Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
            "execute script",
        )
        .await
    }

    /// The text of the open dialog, waiting up to 5 s for one to open.
    pub async fn alert_text(&self) -> Result<String, WebDriverError> {
        let value = self
            .alert_command(Method::GET, "/alert/text", None, "read the dialog")
            .await?;
        Ok(value.as_str().unwrap_or_default().to_owned())
    }

    /// Presses OK in the open dialog (`confirm()`, `alert()`), waiting up
    /// to 5 s for one to open.
    pub async fn accept_alert(&self) -> Result<(), WebDriverError> {
        self.alert_command(
            Method::POST,
            "/alert/accept",
            Some(json!({})),
            "accept the dialog",
        )
        .await
        .map(drop)
    }

    /// Presses Cancel in the open dialog.
    pub async fn dismiss_alert(&self) -> Result<(), WebDriverError> {
        self.alert_command(
            Method::POST,
            "/alert/dismiss",
            Some(json!({})),
            "dismiss the dialog",
        )
        .await
        .map(drop)
    }

    /// A dialog command, tried again while there is no dialog yet (a click
    /// returns before the page's handler has opened it).
    async fn alert_command(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        command: &str,
    ) -> Result<Value, WebDriverError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match self
                .command(method.clone(), path, body.clone(), command)
                .await
            {
                Err(err)
                    if err.code() == Some("no such alert")
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(POLL).await;
                }
                answer => return answer,
            }
        }
    }

    /// Saves a PNG of the window to `path` (its folder is created).
    pub async fn screenshot(&self, path: &Path) -> Result<(), WebDriverError> {
        let value = self
            .command(Method::GET, "/screenshot", None, "screenshot")
            .await?;
        let png =
            value
                .as_str()
                .and_then(base64_decode)
                .ok_or_else(|| WebDriverError::Transport {
                    command: "screenshot".to_owned(),
                    detail: "the answer is not base64".to_owned(),
                })?;
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(path, png));
        written.map_err(|err| WebDriverError::Transport {
            command: "screenshot".to_owned(),
            detail: format!("cannot write {}: {err}", path.display()),
        })
    }

    /// Waits until an element matching `selector` has a text for which
    /// `accept` is true, and returns it. Elements that come and go while it
    /// looks (a view redrawn) are looked for again.
    pub async fn wait_for(
        &self,
        selector: &str,
        accept: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<Element, WebDriverError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut seen = Vec::new();
            match self.texts(selector, &mut seen).await {
                Ok(elements) => {
                    if let Some((element, _)) =
                        elements.into_iter().find(|(_, text)| accept(text.as_str()))
                    {
                        return Ok(element);
                    }
                }
                Err(err) if err.code() == Some("stale element reference") => {}
                Err(err) => return Err(err),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(WebDriverError::Timeout {
                    what: format!("`{selector}` with the expected text ({timeout:?})"),
                    seen,
                    url: self.url().await.unwrap_or_default(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The elements matching `selector` with their texts, also kept in
    /// `seen` for a timeout's message.
    async fn texts(
        &self,
        selector: &str,
        seen: &mut Vec<String>,
    ) -> Result<Vec<(Element, String)>, WebDriverError> {
        let mut found = Vec::new();
        for element in self.find_all(selector).await? {
            let text = self.text(&element).await?;
            seen.push(text.clone());
            found.push((element, text));
        }
        Ok(found)
    }

    /// Ends the session the way a client would (Chromium quits and removes
    /// its processes), with plain blocking IO: `Drop` cannot await.
    fn session_end_blocking(&self) {
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.session_id, self.port
        );
        if stream.write_all(request.as_bytes()).is_err() {
            return;
        }
        // chromedriver answers once Chromium has quit, and then keeps the
        // connection open whatever `Connection: close` says: the head of
        // the answer is all there is to wait for.
        let mut answer: Vec<u8> = Vec::new();
        let mut chunk = [0u8; 1024];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.session_end_blocking();
        // Then `driver` is dropped: chromedriver's process group is killed.
    }
}

/// One WebDriver request; a non-2xx answer is the browser's error.
async fn send(
    http: &reqwest::Client,
    method: Method,
    url: &str,
    body: Option<Value>,
    command: &str,
) -> Result<Value, WebDriverError> {
    let transport = |detail: String| WebDriverError::Transport {
        command: command.to_owned(),
        detail,
    };
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .map_err(|err| transport(err.to_string()))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|err| transport(err.to_string()))?;
    let answer: Value = serde_json::from_str(&text).map_err(|_| {
        transport(format!(
            "HTTP {status}, not JSON: {}",
            text.chars().take(300).collect::<String>()
        ))
    })?;
    let value = answer.get("value").cloned().unwrap_or(Value::Null);
    if !status.is_success() {
        // chromedriver's message goes on with "(Session info: …)" lines.
        let message = value["message"].as_str().unwrap_or_default();
        return Err(WebDriverError::Browser {
            command: command.to_owned(),
            error: value["error"]
                .as_str()
                .unwrap_or("unknown error")
                .to_owned(),
            message: message.lines().next().unwrap_or_default().to_owned(),
        });
    }
    Ok(value)
}

fn element_of(value: &Value, selector: &str) -> Result<Element, WebDriverError> {
    value[ELEMENT_KEY]
        .as_str()
        .map(|id| Element {
            id: id.to_owned(),
            selector: selector.to_owned(),
        })
        .ok_or_else(|| WebDriverError::Transport {
            command: format!("find `{selector}`"),
            detail: format!("no element reference in {value}"),
        })
}

/// Standard base64 (screenshots come as such); None for other bytes.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer: u32 = 0;
    let mut bits: u32 = 0;
    for c in text.bytes() {
        let sextet = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            b'\r' | b'\n' => continue,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::base64_decode;

    #[test]
    fn base64_decodes_padded_and_unpadded_and_refuses_other_bytes() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(base64_decode("aGk").unwrap(), b"hi");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert_eq!(base64_decode("iVBORw0KGgo=").unwrap(), b"\x89PNG\r\n\x1a\n");
        assert_eq!(base64_decode("aGVs*G8="), None);
    }
}
