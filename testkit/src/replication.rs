//! A MySQL deployment that fails over as a managed one does: a MariaDB
//! primary, a semi-synchronous replica, and one address in front of them
//! (HAProxy in TCP mode) switched to the replica once it is promoted.

use std::path::PathBuf;
use std::time::Duration;

use sqlx::{Connection, MySqlConnection, Row};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::eventually;
use super::procs::{free_port, port_wait, PrivateMariadb, Proc};
use super::scratch_dir;

/// A TCP proxy in front of one server at a time: the address tickler is
/// given, as a managed service's endpoint is.
pub struct PrivateProxy {
    pub proc: Proc,
    pub port: u16,
    admin: PathBuf,
}

impl PrivateProxy {
    /// HAProxy listening on a port of its own, forwarding to
    /// `127.0.0.1:backend`.
    pub async fn start(backend: u16) -> PrivateProxy {
        let port = free_port();
        let dir = scratch_dir();
        let admin = dir.join("admin.sock");
        let config = dir.join("haproxy.cfg");
        std::fs::write(
            &config,
            format!(
                "global\n  stats socket {} level admin\n\
                 defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 1h\n  timeout server 1h\n\
                 frontend db\n  bind 127.0.0.1:{port}\n  default_backend db\n\
                 backend db\n  server db 127.0.0.1:{backend}\n",
                admin.display()
            ),
        )
        .unwrap();
        let args = vec![
            "-db".to_owned(),
            "-f".to_owned(),
            config.display().to_string(),
        ];
        let proc = Proc::spawn("haproxy", "haproxy", &args, &[], dir.join("haproxy.log"));
        port_wait(port, Duration::from_secs(10)).await;
        PrivateProxy { proc, port, admin }
    }

    /// Points the address at `127.0.0.1:backend` and cuts the sessions
    /// still open to the old server, as an endpoint switch does.
    pub async fn switch(&self, backend: u16) {
        self.command(&format!("set server db/db addr 127.0.0.1 port {backend}"))
            .await;
        self.command("shutdown sessions server db/db").await;
    }

    async fn command(&self, command: &str) -> String {
        let mut socket = tokio::net::UnixStream::connect(&self.admin)
            .await
            .expect("haproxy's admin socket");
        socket
            .write_all(format!("{command}\n").as_bytes())
            .await
            .unwrap();
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.unwrap();
        answer
    }

    /// Server URL (no database) through the proxy, as root.
    pub fn server_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }
}

/// A primary and a semi-synchronous replica of it: a commit the primary
/// acknowledged is in the replica's relay log.
pub struct ReplicatedMariadb {
    pub primary: PrivateMariadb,
    pub replica: PrivateMariadb,
}

impl ReplicatedMariadb {
    pub async fn start() -> ReplicatedMariadb {
        let primary = PrivateMariadb::start_with(
            &[],
            &[
                "--log-bin=binlog".to_owned(),
                "--server-id=1".to_owned(),
                "--binlog-format=ROW".to_owned(),
                "--rpl-semi-sync-master-enabled=ON".to_owned(),
                // A replica that does not acknowledge within this long is
                // given up on (asynchronous until it catches up).
                "--rpl-semi-sync-master-timeout=10000".to_owned(),
            ],
        )
        .await;
        let replica = PrivateMariadb::start_with(
            &[],
            &[
                "--log-bin=binlog".to_owned(),
                "--server-id=2".to_owned(),
                "--binlog-format=ROW".to_owned(),
                "--log-slave-updates=ON".to_owned(),
                "--read-only=ON".to_owned(),
                "--rpl-semi-sync-slave-enabled=ON".to_owned(),
            ],
        )
        .await;
        let mut on_primary = connect(&primary.server_url()).await;
        for statement in [
            "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl'",
            "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'",
        ] {
            sqlx::query(statement)
                .execute(&mut on_primary)
                .await
                .unwrap();
        }
        let mut on_replica = connect(&replica.server_url()).await;
        sqlx::query(&format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = 'repl', MASTER_PASSWORD = 'repl', MASTER_USE_GTID = slave_pos, \
             MASTER_CONNECT_RETRY = 1",
            primary.port
        ))
        .execute(&mut on_replica)
        .await
        .unwrap();
        sqlx::query("START SLAVE")
            .execute(&mut on_replica)
            .await
            .unwrap();
        // Semi-synchronous once the replica has connected.
        let semi_sync = eventually(Duration::from_secs(30), || async {
            let row = sqlx::query("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")
                .fetch_one(&mut connect(&primary.server_url()).await)
                .await
                .ok()?;
            let clients: String = row.try_get(1).ok()?;
            (clients != "0").then_some(())
        })
        .await;
        assert!(
            semi_sync.is_some(),
            "the replica acknowledges the primary's commits"
        );
        ReplicatedMariadb { primary, replica }
    }
}

/// Promotes `replica`, once its primary is gone: applies everything it
/// received, stops replicating and takes writes.
pub async fn replica_promote(replica: &PrivateMariadb) {
    let mut on_replica = connect(&replica.server_url()).await;
    sqlx::query("STOP SLAVE IO_THREAD")
        .execute(&mut on_replica)
        .await
        .unwrap();
    let applied = eventually(Duration::from_secs(60), || async {
        let mut conn = connect(&replica.server_url()).await;
        let row = sqlx::query("SHOW SLAVE STATUS")
            .fetch_one(&mut conn)
            .await
            .ok()?;
        let read: u64 = row.try_get("Read_Master_Log_Pos").ok()?;
        let done: u64 = row.try_get("Exec_Master_Log_Pos").ok()?;
        let read_file: String = row.try_get("Master_Log_File").ok()?;
        let done_file: String = row.try_get("Relay_Master_Log_File").ok()?;
        (read == done && read_file == done_file).then_some(())
    })
    .await;
    assert!(applied.is_some(), "the replica applies what it received");
    for statement in [
        "STOP SLAVE",
        "RESET SLAVE ALL",
        "SET GLOBAL read_only = OFF",
    ] {
        sqlx::query(statement)
            .execute(&mut on_replica)
            .await
            .unwrap();
    }
}

async fn connect(url: &str) -> MySqlConnection {
    eventually(Duration::from_secs(30), || async {
        MySqlConnection::connect(url).await.ok()
    })
    .await
    .unwrap_or_else(|| panic!("{url} takes connections"))
}

/// A three-node MariaDB Galera cluster on loopback (Debian's `galera-4`),
/// its state transfers by rsync. The first node bootstraps the cluster;
/// the others join it.
pub struct GaleraCluster {
    pub nodes: Vec<PrivateMariadb>,
}

/// Where Debian's `galera-4` puts the provider.
const GALERA_PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

impl GaleraCluster {
    pub async fn start() -> GaleraCluster {
        assert!(
            std::path::Path::new(GALERA_PROVIDER).exists(),
            "galera-4 is installed (scripts/services tools installs it)"
        );
        let group: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let address = group
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let name = format!("tickler-{}", super::unique(""));
        let mut nodes = Vec::new();
        for (i, port) in group.iter().enumerate() {
            let mut args = vec![
                "--binlog-format=ROW".to_owned(),
                "--innodb-autoinc-lock-mode=2".to_owned(),
                "--wsrep-on=ON".to_owned(),
                format!("--wsrep-provider={GALERA_PROVIDER}"),
                format!("--wsrep-cluster-name={name}"),
                format!("--wsrep-cluster-address=gcomm://{address}"),
                format!("--wsrep-node-address=127.0.0.1:{port}"),
                format!("--wsrep-node-name=node{i}"),
                format!(
                    "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{port};ist.recv_addr=127.0.0.1:{}",
                    free_port()
                ),
                "--wsrep-sst-method=rsync".to_owned(),
                format!("--wsrep-sst-receive-address=127.0.0.1:{}", free_port()),
            ];
            if i == 0 {
                args.push("--wsrep-new-cluster".to_owned());
            }
            let node = PrivateMariadb::start_as("mysql", &[], &args).await;
            let size = i + 1;
            let joined = eventually(Duration::from_secs(60), || async {
                let mut conn = MySqlConnection::connect(&node.server_url()).await.ok()?;
                let ready: String = sqlx::query("SHOW STATUS LIKE 'wsrep_ready'")
                    .fetch_one(&mut conn)
                    .await
                    .ok()?
                    .try_get(1)
                    .ok()?;
                let members: String = sqlx::query("SHOW STATUS LIKE 'wsrep_cluster_size'")
                    .fetch_one(&mut conn)
                    .await
                    .ok()?
                    .try_get(1)
                    .ok()?;
                (ready == "ON" && members == size.to_string()).then_some(())
            })
            .await;
            assert!(joined.is_some(), "galera node {i} joins the cluster");
            nodes.push(node);
        }
        GaleraCluster { nodes }
    }
}
