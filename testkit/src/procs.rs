//! Processes a fault test can kill, pause and restart: private instances of
//! Redis, MariaDB and tansu (so a FLUSHALL or a kill -9 hits only that test),
//! and the `tickler` binary itself.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A port nothing listens on, for a server a test starts.
///
/// Not the kernel's pick (`bind(0)`): that comes from the ephemeral range,
/// where, between the check and the server's own bind, another test's
/// server may pick it too or an outgoing connection take it — the server
/// then fails to start while the test talks to someone else's. These come
/// from below the ephemeral range (32768 on Linux), each handed out once
/// per test process (the suite's binaries run one after another), from a
/// random start.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    port_from(&NEXT, 22_000, 10_000, |_| true)
}

/// The next port of the band `first..first + count` that is free, and for
/// which `also` holds.
fn port_from(next: &AtomicU32, first: u32, count: u32, also: impl Fn(u16) -> bool) -> u16 {
    let _ = next.compare_exchange(
        u32::MAX,
        rand::random_range(0..count),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    loop {
        let port = (first + next.fetch_add(1, Ordering::Relaxed) % count) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() && also(port) {
            return port;
        }
    }
}

/// A scratch directory for one test's processes.
/// The `tickler` binary of this build: next to the `deps/` directory the
/// running test executable is in (cargo builds it for integration tests),
/// or `TICKLER_BIN` (a release build for long runs, as `scripts/chaos`).
pub fn tickler_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("TICKLER_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("the test knows its executable");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("tests run from target/<profile>/deps");
    let bin = dir.join(format!("tickler{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is built (cargo test builds it)",
        bin.display()
    );
    bin
}

pub use crate::scratch_dir;

pub async fn port_wait(port: u16, wait: Duration) {
    let deadline = tokio::time::Instant::now() + wait;
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing answers on port {port} after {wait:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// A child process that can be killed and started again with the same
/// command line. Killed with -9 when dropped.
pub struct Proc {
    name: String,
    program: String,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    log: PathBuf,
    /// Working directory: the log's directory.
    dir: PathBuf,
    child: Option<Child>,
}

impl Proc {
    pub fn spawn(
        name: &str,
        program: &str,
        args: &[String],
        envs: &[(String, String)],
        log: PathBuf,
    ) -> Proc {
        let mut proc = Proc {
            name: name.to_owned(),
            program: program.to_owned(),
            args: args.to_vec(),
            envs: envs.to_vec(),
            dir: log
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir),
            log,
            child: None,
        };
        proc.start();
        proc
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start {}: {err}", self.program));
        self.child = Some(child);
    }

    /// Sets an environment variable for the next `start`.
    pub fn env_set(&mut self, key: &str, value: &str) {
        self.envs.retain(|(k, _)| k != key);
        self.envs.push((key.to_owned(), value.to_owned()));
    }

    /// How it exited, once it has (reaped then, so that `start` may run it
    /// again); None while it runs or when it was not started. Never blocks.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    /// Whether it was started and not killed or stopped since.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// kill -9, and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and wait for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "-TERM");
            let _ = child.wait();
        }
    }

    /// SIGTERM without waiting: the process drains while the caller goes on
    /// (say, to resume the broker it is draining towards); `exited` tells
    /// when it is gone.
    pub fn terminate(&self) {
        if let Some(child) = &self.child {
            signal(child.id(), "-TERM");
        }
    }

    /// Whether it has exited (or was never started); reaped if so, so that
    /// `start` may run it again. Never blocks.
    pub fn exited(&mut self) -> bool {
        let Some(child) = &mut self.child else {
            return true;
        };
        match child.try_wait() {
            Ok(Some(_)) => {
                self.child = None;
                true
            }
            _ => false,
        }
    }

    pub fn pause(&self) {
        if let Some(child) = &self.child {
            signal(child.id(), "-STOP");
        }
    }

    pub fn resume(&self) {
        if let Some(child) = &self.child {
            signal(child.id(), "-CONT");
        }
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process started is still there (not exited, nor a
    /// zombie waiting to be reaped).
    pub fn alive(&self) -> bool {
        let Some(child) = &self.child else {
            return false;
        };
        std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
            .ok()
            .and_then(|stat| {
                // pid (comm) state ...: the state follows the last ')'.
                let after = &stat[stat.rfind(')')? + 1..];
                after.split_whitespace().next().map(|state| state != "Z")
            })
            .unwrap_or(false)
    }

    /// How many times `needle` occurs in this process's log so far.
    pub fn log_count(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|text| text.matches(needle).count())
            .unwrap_or(0)
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            signal(child.id(), "-CONT");
        }
        self.kill9();
    }
}

/// A Redis of this test's own, without persistence.
pub struct PrivateRedis {
    pub proc: Proc,
    pub port: u16,
}

impl PrivateRedis {
    pub async fn start() -> PrivateRedis {
        PrivateRedis::start_with("redis", &[]).await
    }

    /// A Redis named `name` (in its log's directory and `Proc`), with
    /// `extra` arguments (e.g. `--replicaof 127.0.0.1 PORT`).
    pub async fn start_with(name: &str, extra: &[&str]) -> PrivateRedis {
        let port = free_port();
        let dir = scratch_dir();
        let args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.to_str().unwrap(),
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
        let proc = Proc::spawn(name, "redis-server", &args, &[], dir.join("redis.log"));
        port_wait(port, Duration::from_secs(10)).await;
        PrivateRedis { proc, port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A Redis that speaks only TLS (`tls-port`, no plain port) with
    /// `certs`' server certificate; clients need not present one.
    pub async fn start_tls(certs: &super::tls::TestCerts) -> PrivateRedis {
        let port = free_port();
        let dir = scratch_dir();
        let args: Vec<String> = [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &super::tls::path(&certs.server_cert),
            "--tls-key-file",
            &super::tls::path(&certs.server_key),
            "--tls-ca-cert-file",
            &super::tls::path(&certs.ca),
            "--tls-auth-clients",
            "no",
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let proc = Proc::spawn("redis", "redis-server", &args, &[], dir.join("redis.log"));
        port_wait(port, Duration::from_secs(10)).await;
        PrivateRedis { proc, port }
    }

    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/0", self.port)
    }

    pub async fn restart(&mut self) {
        self.proc.kill9();
        self.proc.start();
        port_wait(self.port, Duration::from_secs(10)).await;
    }
}

/// A Redis Cluster of this test's own: three masters, no replicas, no
/// persistence (a node restarted comes back empty, with its slots).
pub struct PrivateRedisCluster {
    pub nodes: Vec<Proc>,
    pub ports: Vec<u16>,
}

/// A port free both itself and 10000 above (the cluster bus): from a band
/// whose bus ports stay below [`free_port`]'s.
fn cluster_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    port_from(&NEXT, 10_000, 2_000, |port| {
        TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
    })
}

impl PrivateRedisCluster {
    pub async fn start() -> PrivateRedisCluster {
        let dir = scratch_dir();
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 3 {
            let port = cluster_port();
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        let mut nodes = Vec::new();
        for port in &ports {
            let node_dir = dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir).unwrap();
            let args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                node_dir.to_str().unwrap(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            nodes.push(Proc::spawn(
                &format!("redis-{port}"),
                "redis-server",
                &args,
                &[],
                node_dir.join("redis.log"),
            ));
        }
        for port in &ports {
            port_wait(*port, Duration::from_secs(10)).await;
        }
        let mut create: Vec<String> = vec!["--cluster".into(), "create".into()];
        create.extend(ports.iter().map(|p| format!("127.0.0.1:{p}")));
        create.extend(["--cluster-replicas", "0", "--cluster-yes"].map(String::from));
        let out = Command::new("redis-cli").args(&create).output().unwrap();
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = PrivateRedisCluster { nodes, ports };
        cluster.ok_wait().await;
        cluster
    }

    /// Waits until every node says `cluster_state:ok`.
    pub async fn ok_wait(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        for port in &self.ports {
            loop {
                let out = Command::new("redis-cli")
                    .args(["-p", &port.to_string(), "cluster", "info"])
                    .output()
                    .unwrap();
                if String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the cluster is not ok after 30 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// The seed URLs, comma-separated, as `redis.url` takes them.
    pub fn urls(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// kill -9 of master `i` and a start from nothing (no persistence):
    /// it keeps its slots (nodes.conf) and loses its keys.
    pub async fn restart(&mut self, i: usize) {
        self.nodes[i].kill9();
        self.nodes[i].start();
        port_wait(self.ports[i], Duration::from_secs(10)).await;
        self.ok_wait().await;
    }
}

/// A MariaDB server of this test's own (its own data directory), so it can
/// be killed with -9 and restarted through crash recovery.
pub struct PrivateMariadb {
    pub proc: Proc,
    pub port: u16,
}

impl PrivateMariadb {
    pub async fn start() -> PrivateMariadb {
        PrivateMariadb::start_with_env(&[]).await
    }

    /// A server whose clock runs `offset` from the real one (libfaketime's
    /// `FAKETIME`, e.g. "-30s" or "+5s"); its monotonic clock is left alone.
    pub async fn start_faketime(offset: &str) -> PrivateMariadb {
        let faketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
        assert!(
            std::path::Path::new(faketime).exists(),
            "libfaketime is installed (scripts/services installs it)"
        );
        let env: Vec<(String, String)> = [
            ("LD_PRELOAD", faketime),
            ("FAKETIME", offset),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        PrivateMariadb::start_with_env(&env).await
    }

    /// Starts the server with extra environment (e.g. libfaketime).
    pub async fn start_with_env(env: &[(String, String)]) -> PrivateMariadb {
        PrivateMariadb::start_with(env, &[]).await
    }

    /// A server that takes only TLS connections (`require_secure_transport`)
    /// with `certs`' server certificate.
    pub async fn start_tls(certs: &super::tls::TestCerts) -> PrivateMariadb {
        let args = [
            format!("--ssl-cert={}", certs.server_cert.display()),
            format!("--ssl-key={}", certs.server_key.display()),
            format!("--ssl-ca={}", certs.ca.display()),
            "--require-secure-transport=ON".to_owned(),
        ];
        PrivateMariadb::start_with(&[], &args).await
    }

    /// Starts the server with extra environment and arguments.
    pub async fn start_with(env: &[(String, String)], extra: &[String]) -> PrivateMariadb {
        PrivateMariadb::start_as("root", env, extra).await
    }

    /// Starts the server running as the system `user` (its files that
    /// user's): a Galera node's state transfer writes them as it.
    pub async fn start_as(
        user: &str,
        env: &[(String, String)],
        extra: &[String],
    ) -> PrivateMariadb {
        let port = free_port();
        let dir = scratch_dir();
        let data = dir.join("data");
        // Its own temporary directory: a starting server (and the bootstrap)
        // deletes every `#sql*` file in its tmpdir, which in /tmp would be the
        // temporary tables other servers are using at that moment.
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        if user != "root" {
            let owned = Command::new("chown")
                .args(["-R", &format!("{user}:{user}"), &dir.display().to_string()])
                .status()
                .expect("chown");
            assert!(owned.success(), "{} given to {user}", dir.display());
        }
        // The bootstrap occasionally fails under a loaded machine; its log is
        // kept, and a fresh data directory tried again.
        let install_log = dir.join("install.log");
        let mut installed = false;
        for _ in 0..3 {
            let _ = std::fs::remove_dir_all(&data);
            let log = std::fs::File::create(&install_log).unwrap();
            let status = Command::new("mariadb-install-db")
                .args([
                    "--no-defaults",
                    &format!("--datadir={}", data.display()),
                    &format!("--tmpdir={}", tmp.display()),
                    &format!("--user={user}"),
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ])
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .status()
                .expect("mariadb-install-db (apt-get install mariadb-server)");
            if status.success() {
                installed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(
            installed,
            "mariadb-install-db failed three times:\n{}",
            std::fs::read_to_string(&install_log).unwrap_or_default()
        );
        let args: Vec<String> = vec![
            "--no-defaults".into(),
            format!("--datadir={}", data.display()),
            format!("--tmpdir={}", tmp.display()),
            format!("--port={port}"),
            "--bind-address=127.0.0.1".into(),
            format!("--socket={}", dir.join("sock").display()),
            format!("--pid-file={}", dir.join("pid").display()),
            format!("--user={user}"),
            "--skip-log-bin".into(),
            "--innodb-buffer-pool-size=64M".into(),
            "--max-connections=500".into(),
        ];
        let args: Vec<String> = args.into_iter().chain(extra.iter().cloned()).collect();
        let proc = Proc::spawn("mariadb", "mariadbd", &args, env, dir.join("mariadb.log"));
        port_wait(port, Duration::from_secs(30)).await;
        PrivateMariadb { proc, port }
    }

    /// Server URL (no database), as root without password on loopback.
    pub fn server_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    pub async fn restart(&mut self) {
        self.proc.start();
        port_wait(self.port, Duration::from_secs(60)).await;
    }
}

/// The tansu that scripts/services installed (cargo's bin), else PATH's.
fn tansu_bin() -> String {
    std::env::var("HOME")
        .map(|home| format!("{home}/.cargo/bin/tansu"))
        .ok()
        .filter(|path| std::path::Path::new(path).exists())
        .unwrap_or_else(|| "tansu".to_owned())
}

/// A tansu broker of this test's own, storing in SQLite so topics and
/// records survive a stop and start.
pub struct PrivateTansu {
    pub proc: Proc,
    pub port: u16,
}

impl PrivateTansu {
    /// A tansu storing in SQLite, so topics and records survive a stop and
    /// start.
    pub async fn start() -> PrivateTansu {
        // tansu reads the path relative to its working directory.
        PrivateTansu::start_on("sqlite://tansu.db").await
    }

    /// A tansu storing in memory, as the shared broker does: for a test
    /// that pauses it (SIGSTOP keeps the memory) rather than restarting it.
    /// tansu 0.6.0's SQLite storage is no good for that: once sends had
    /// timed out across a SIGSTOP, its idempotent-producer check found no
    /// row for the producer's epoch and panicked ("more or less than one
    /// row"), and the broker refused every request after; the memory
    /// storage answers an unknown epoch with an error.
    pub async fn start_memory() -> PrivateTansu {
        PrivateTansu::start_on("memory://tansu/").await
    }

    async fn start_on(storage: &str) -> PrivateTansu {
        let port = free_port();
        let dir = scratch_dir();
        let listener = format!("tcp://127.0.0.1:{port}");
        let args: Vec<String> = vec![
            "broker".into(),
            "--listener-url".into(),
            listener.clone(),
            "--advertised-listener-url".into(),
            listener,
            "--storage-engine".into(),
            storage.into(),
        ];
        let tansu = tansu_bin();
        let proc = Proc::spawn("tansu", &tansu, &args, &[], dir.join("tansu.log"));
        port_wait(port, Duration::from_secs(20)).await;
        PrivateTansu { proc, port }
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A broker reached only through TLS: tansu (whose own TLS is not wired
    /// up in 0.6.0) behind a TLS terminator (socat) with `certs`' server
    /// certificate, and advertising the terminator's address, so every
    /// connection a client makes to it is TLS. `brokers()` is the
    /// terminator's address; the `Proc` of the terminator comes second.
    pub async fn start_behind_tls(certs: &super::tls::TestCerts) -> (PrivateTansu, Proc) {
        let inner = free_port();
        let port = free_port();
        let dir = scratch_dir();
        let advertised = format!("tcp://127.0.0.1:{port}");
        let args: Vec<String> = vec![
            "broker".into(),
            "--listener-url".into(),
            format!("tcp://127.0.0.1:{inner}"),
            "--advertised-listener-url".into(),
            advertised,
            "--storage-engine".into(),
            "memory://tansu/".into(),
        ];
        let tansu = tansu_bin();
        let proc = Proc::spawn("tansu", &tansu, &args, &[], dir.join("tansu.log"));
        port_wait(inner, Duration::from_secs(20)).await;
        let listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
            certs.server_cert.display(),
            certs.server_key.display()
        );
        let socat = Proc::spawn(
            "socat",
            "socat",
            &[listen, format!("TCP:127.0.0.1:{inner}")],
            &[],
            dir.join("socat.log"),
        );
        port_wait(port, Duration::from_secs(10)).await;
        (PrivateTansu { proc, port }, socat)
    }

    pub async fn restart(&mut self) {
        self.proc.start();
        port_wait(self.port, Duration::from_secs(20)).await;
    }

    /// Starts the broker again, on the same storage, if it panicked since
    /// `seen` panics: tansu 0.6.0's SQLite storage sometimes panics after a
    /// restart ("more or less than one row", an unreachable branch in its
    /// group store) and then refuses every request. An operator would
    /// restart it; so does the test, and what the broker had stored must
    /// still be there. Returns the panics seen now.
    pub async fn revive_if_crashed(&mut self, seen: usize) -> usize {
        let now = self.proc.log_count("panicked at");
        if now > seen {
            eprintln!("the private tansu panicked (its SQLite storage); starting it again on the same storage");
            self.proc.kill9();
            self.proc.start();
            port_wait(self.port, Duration::from_secs(20)).await;
        }
        now
    }
}
