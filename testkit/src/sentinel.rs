//! A Redis that fails over as a Sentinel deployment does: a master, one
//! replica, and three sentinels that agree (quorum 2) to promote the
//! replica when the master stops answering for a second. No persistence:
//! a master killed and replaced loses the writes its replica had not yet
//! received.

use std::time::Duration;

use super::eventually;
use super::procs::{free_port, port_wait, PrivateRedis, Proc};
use super::scratch_dir;

/// The name the sentinels know the master by.
pub const MASTER_NAME: &str = "tickler-master";

pub struct RedisWithSentinels {
    pub master: PrivateRedis,
    pub replica: PrivateRedis,
    pub sentinels: Vec<(Proc, u16)>,
}

/// `redis-cli -p port args...`'s output, trimmed; None when it fails.
pub fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

impl RedisWithSentinels {
    pub async fn start() -> RedisWithSentinels {
        let master = PrivateRedis::start().await;
        let replica = replica_start(master.port).await;
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            sentinels.push(sentinel_start(master.port).await);
        }
        let world = RedisWithSentinels {
            master,
            replica,
            sentinels,
        };
        // Ready when the replica has synced and every sentinel knows the
        // replica and the two other sentinels (a failover needs their
        // votes).
        let replica_port = world.replica.port;
        eventually(Duration::from_secs(30), || async {
            let info = redis_cli(replica_port, &["INFO", "replication"])?;
            info.contains("master_link_status:up").then_some(())
        })
        .await
        .expect("the replica syncs with the master");
        for (_, port) in &world.sentinels {
            let port = *port;
            eventually(Duration::from_secs(30), || async move {
                let replicas = redis_cli(port, &["SENTINEL", "REPLICAS", MASTER_NAME])?;
                let others = redis_cli(port, &["SENTINEL", "SENTINELS", MASTER_NAME])?;
                let knows_replica = replicas.contains(&replica_port.to_string());
                let knows_others = others.matches("runid").count() >= 2;
                (knows_replica && knows_others).then_some(())
            })
            .await
            .expect("every sentinel knows the replica and the other sentinels");
        }
        world
    }

    /// `redis+sentinel://` naming the three sentinels and the master.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(_, port)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}/0", hosts.join(","))
    }
}

/// The port of the server the first of `sentinels` names master now.
pub fn sentinel_master_port(sentinels: &[(Proc, u16)]) -> Option<u16> {
    let (_, port) = sentinels.first()?;
    let addr = redis_cli(*port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])?;
    addr.lines().nth(1)?.trim().parse().ok()
}

async fn replica_start(master: u16) -> PrivateRedis {
    let master = master.to_string();
    PrivateRedis::start_with("redis-replica", &["--replicaof", "127.0.0.1", &master]).await
}

async fn sentinel_start(master: u16) -> (Proc, u16) {
    let port = free_port();
    let dir = scratch_dir();
    // Sentinel rewrites its configuration file: one per sentinel.
    let config = dir.join("sentinel.conf");
    std::fs::write(
        &config,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 10000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir = dir.display()
        ),
    )
    .unwrap();
    let args = vec![config.display().to_string(), "--sentinel".to_owned()];
    let proc = Proc::spawn(
        "redis-sentinel",
        "redis-server",
        &args,
        &[],
        dir.join("sentinel.log"),
    );
    port_wait(port, Duration::from_secs(10)).await;
    (proc, port)
}
