//! `tickler migrate` on the servers users run: a MariaDB with binary
//! logging on and MySQL 8's default `sql_mode`, and an account holding every
//! privilege on its database but SUPER (as on RDS and Aurora). Creating a
//! trigger is refused there (ERROR 1419), so the schema must not need one:
//! tickler writes the history itself, and the triggers that record hand
//! edits are an option that, refused, is a warning.

use std::process::{Command, Output};

use sqlx::Connection;
use tickler_testkit::procs::{tickler_bin, PrivateMariadb};

/// MySQL 8.0's default.
const MYSQL8_SQL_MODE: &str = "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,\
     NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION";

async fn root_exec(mariadb: &PrivateMariadb, statements: &[&str]) {
    let mut conn = sqlx::MySqlConnection::connect(&mariadb.server_url())
        .await
        .unwrap();
    for statement in statements {
        sqlx::Executor::execute(&mut conn, *statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    conn.close().await.unwrap();
}

fn migrate(url: &str, hand_edits: &str) -> Output {
    let output = Command::new(tickler_bin())
        .arg("migrate")
        .env("TICKLER_MYSQL_URL", url)
        .env("TICKLER_MYSQL_HISTORY_HAND_EDITS", hand_edits)
        .output()
        .expect("tickler runs");
    assert!(
        output.status.success(),
        "migrate failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// (actor, status) of job `id`'s history.
async fn history(url: &str, id: u64) -> Vec<(String, String)> {
    let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
    let rows = sqlx::query_as(
        "SELECT CAST(actor AS CHAR), CAST(status AS CHAR) FROM job_events WHERE job_id = ? ORDER BY id",
    )
    .bind(id)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_needs_no_super_where_binary_logging_is_on() {
    let mariadb = PrivateMariadb::start_with(
        &[],
        &[
            "--log-bin=binlog".to_owned(),
            "--server-id=1".to_owned(),
            format!("--sql-mode={MYSQL8_SQL_MODE}"),
        ],
    )
    .await;
    root_exec(
        &mariadb,
        &[
            // A binary default collation: MySQL and MariaDB flag the text
            // columns of refinery's table BINARY, which a second `migrate`
            // must still read.
            "CREATE DATABASE app CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'",
            "GRANT ALL PRIVILEGES ON app.* TO 'app'@'%'",
        ],
    )
    .await;
    let server = mariadb.server_url();
    let port = server.rsplit(':').next().unwrap();
    let url = format!("mysql://app:app-pw@127.0.0.1:{port}/app");

    // Binary logging is on, and a trigger is out of this account's reach.
    let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let log_bin: i64 = sqlx::query_scalar("SELECT @@log_bin")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(log_bin, 1);
    sqlx::Executor::execute(&mut conn, "CREATE TABLE t (id INT)")
        .await
        .unwrap();
    let refused = sqlx::Executor::execute(
        &mut conn,
        "CREATE TRIGGER t_probe AFTER INSERT ON t FOR EACH ROW SET @x = 1",
    )
    .await
    .expect_err("a trigger needs SUPER here");
    assert!(refused.to_string().contains("SUPER"), "{refused}");
    sqlx::Executor::execute(&mut conn, "DROP TABLE t")
        .await
        .unwrap();

    // The schema applies in full; the hand-edit triggers are a warning.
    let first = migrate(&url, "trigger");
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        stdout.contains("applied V26__drop_trigger_jobs_changed"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(
        stderr.contains("warning: mysql.history_hand_edits = trigger")
            && stderr.contains("cannot be created"),
        "{stderr}"
    );
    let triggers: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'app'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(triggers, 0, "no trigger was made");
    // Again: nothing to apply; with `off`, nothing to warn about.
    let again = migrate(&url, "off");
    assert!(String::from_utf8_lossy(&again.stdout).contains("schema is up to date"));
    assert!(
        !String::from_utf8_lossy(&again.stderr).contains("warning"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // tickler's history is whole without a trigger.
    let store = tickler::store::Store::connect_lazy(&url, 2, tickler::store::Actor::Api).unwrap();
    let job = tickler_testkit::store::job_new("migrate-test", 60_000);
    let (created, _) = store
        .with_actor("api:billing")
        .job_insert(&job)
        .await
        .unwrap();
    store.job_cancel(created.id).await.unwrap();
    assert_eq!(
        history(&url, created.id).await,
        [
            ("api:billing".to_owned(), "pending".to_owned()),
            ("api".to_owned(), "cancelled".to_owned()),
        ]
    );
    store.close().await;
    conn.close().await.unwrap();

    // An account that may create triggers gets the hand-edit ones, and a
    // hand edit is recorded as `sql`; tickler's changes once only.
    root_exec(
        &mariadb,
        &["SET GLOBAL log_bin_trust_function_creators = 1"],
    )
    .await;
    let granted = migrate(&url, "trigger");
    assert!(
        String::from_utf8_lossy(&granted.stdout).contains("hand edits in SQL are recorded"),
        "{}",
        String::from_utf8_lossy(&granted.stderr)
    );
    let store = tickler::store::Store::connect_lazy(&url, 2, tickler::store::Actor::Api).unwrap();
    let (moved, _) = store
        .job_insert(&job_with_key(&job, "second"))
        .await
        .unwrap();
    let mut hand = sqlx::MySqlConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE jobs SET schedule_time = schedule_time + INTERVAL 1 MINUTE WHERE id = ?")
        .bind(moved.id)
        .execute(&mut hand)
        .await
        .unwrap();
    hand.close().await.unwrap();
    store.job_cancel(moved.id).await.unwrap();
    assert_eq!(
        history(&url, moved.id).await,
        [
            ("api".to_owned(), "pending".to_owned()),
            ("sql".to_owned(), "pending".to_owned()),
            ("api".to_owned(), "cancelled".to_owned()),
        ]
    );
    store.close().await;

    // A tickler on that server and account dispatches on time.
    dispatch_smoke(&url).await;
}

/// A tickler on the database at `url` produces a job due in a second.
async fn dispatch_smoke(url: &str) {
    let prefix = tickler_testkit::unique("tickler-t-");
    let config = tickler_testkit::test_config(url, &prefix);
    let topic = tickler_testkit::unique("tickler-test-");
    tickler::kafka::topic_ensure_with(&config.kafka.brokers, &config.kafka.options, &topic, 1)
        .await
        .unwrap();
    let consumer = tickler_testkit::consumer_from_beginning(&config.kafka.brokers, &topic);
    let running = tickler::app::start(config, tokio_util::sync::CancellationToken::new())
        .await
        .expect("tickler starts");
    let due = tickler_testkit::store::job_new(&topic, 1_000);
    let (job, _) = running.store.job_insert(&due).await.unwrap();
    let records =
        tickler_testkit::records_read(&consumer, 1, std::time::Duration::from_secs(30)).await;
    assert_eq!(records.len(), 1, "the job is produced");
    assert_eq!(
        records[0].header("tickler-job-id"),
        Some(job.id.to_string().as_str())
    );
    running.shutdown().await;
}

/// The columns and indexes of the database at `url`, one line each, for
/// comparing two schemas.
async fn schema_lines(url: &str) -> Vec<String> {
    let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
    let columns: Vec<(
        String,
        String,
        u64,
        String,
        String,
        Option<String>,
        Option<String>,
        String,
        String,
    )> = sqlx::query_as(
        "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE, \
             COLUMN_DEFAULT, COLLATION_NAME, EXTRA, COALESCE(GENERATION_EXPRESSION, '') \
             FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let indexes: Vec<(String, String, u32, String, i64)> = sqlx::query_as(
        "SELECT TABLE_NAME, INDEX_NAME, CAST(SEQ_IN_INDEX AS UNSIGNED), COLUMN_NAME, NON_UNIQUE \
         FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let mut lines: Vec<String> = columns
        .into_iter()
        // The baseline's one deliberate difference (see its header).
        .map(|(table, column, position, kind, null, default, collation, extra, generated)| {
            let collation = match (table.as_str(), collation.as_deref()) {
                ("api_tokens", Some(_)) => "(case-insensitive)".to_owned(),
                (_, other) => other.unwrap_or_default().to_owned(),
            };
            format!("column {table}.{column} #{position} {kind} null={null} default={default:?} {collation} {extra} {generated}")
        })
        .collect();
    lines.extend(
        indexes
            .into_iter()
            .map(|(table, index, seq, column, non_unique)| {
                format!("index {table}.{index} {seq}:{column} non_unique={non_unique}")
            }),
    );
    lines.sort();
    lines
}

/// TiDB cannot run the migrations as written (V11's collation, V10's
/// column change), so an empty database there gets `schema/baseline.sql`
/// and the migrations it stands for are recorded as applied. Here, on
/// MariaDB, the baseline must make the very schema the migrations make,
/// and a tickler must run on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_baseline_schema_is_the_schema_the_migrations_make() {
    let server = tickler_testkit::mysql_server_url();
    let migrated = tickler_testkit::unique("tickler_t_");
    let baselined = tickler_testkit::unique("tickler_t_");
    let mut root = sqlx::MySqlConnection::connect(&server).await.unwrap();
    for name in [&migrated, &baselined] {
        sqlx::Executor::execute(&mut root, format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
    }
    let migrated_url = format!("{server}/{migrated}");
    let baselined_url = format!("{server}/{baselined}");
    let run = |url: &str, baseline: &str| {
        let output = Command::new(tickler_bin())
            .arg("migrate")
            .env("TICKLER_MYSQL_URL", url)
            .env("TICKLER_MYSQL_SCHEMA_BASELINE", baseline)
            .output()
            .expect("tickler runs");
        assert!(
            output.status.success(),
            "migrate failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let stepwise = run(&migrated_url, "auto");
    assert!(
        stepwise.contains("applied V1__"),
        "MariaDB is not TiDB: {stepwise}"
    );
    let at_once = run(&baselined_url, "on");
    assert!(
        at_once.contains("schema/baseline.sql") && !at_once.contains("applied V1__"),
        "{at_once}"
    );
    assert_eq!(
        schema_lines(&baselined_url).await,
        schema_lines(&migrated_url).await
    );
    // The record matches the migrations': nothing more to apply, and no
    // divergence for refinery to refuse.
    assert!(run(&baselined_url, "on").contains("schema is up to date"));
    assert!(run(&baselined_url, "off").contains("schema is up to date"));

    dispatch_smoke(&baselined_url).await;
    for name in [&migrated, &baselined] {
        sqlx::Executor::execute(&mut root, format!("DROP DATABASE {name}").as_str())
            .await
            .unwrap();
    }
}

fn job_with_key(job: &tickler::domain::job::NewJob, key: &str) -> tickler::domain::job::NewJob {
    tickler::domain::job::NewJob {
        key: Some(key.to_owned()),
        ..job.clone()
    }
}

/// An empty database on the shared server: a connection to the server (to
/// drop it afterwards), its name and its URL.
async fn database_empty() -> (sqlx::MySqlConnection, String, String) {
    let server = tickler_testkit::mysql_server_url();
    let mut admin = sqlx::MySqlConnection::connect(&server).await.unwrap();
    let name = tickler_testkit::unique("tickler_t_");
    sqlx::Executor::execute(&mut admin, format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    let url = format!("{server}/{name}");
    (admin, name, url)
}

/// `tickler migrate`, with `--to` when given, on the database at `url`.
fn migrate_to(url: &str, to: Option<u32>) {
    let mut command = Command::new(tickler_bin());
    command.arg("migrate").env("TICKLER_MYSQL_URL", url);
    if let Some(to) = to {
        command.arg("--to").arg(to.to_string());
    }
    let output = command.output().expect("tickler runs");
    assert!(
        output.status.success(),
        "migrate failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The jobs table's definition as a sorted set of lines (the order of its
/// keys follows the order they were added in, and AUTO_INCREMENT its rows).
async fn jobs_definition(conn: &mut sqlx::MySqlConnection) -> Vec<String> {
    let (_, create): (String, String) = sqlx::query_as("SHOW CREATE TABLE jobs")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let mut lines: Vec<String> = create
        .lines()
        .map(|line| {
            let line = line.trim().trim_end_matches(',');
            line.split(' ')
                .filter(|word| !word.starts_with("AUTO_INCREMENT="))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    lines.sort();
    lines
}

async fn schema_version(conn: &mut sqlx::MySqlConnection) -> i32 {
    sqlx::query_scalar("SELECT MAX(version) FROM refinery_schema_history")
        .fetch_one(&mut *conn)
        .await
        .unwrap()
}

/// Runs the statements of one of docs/sql/*.sql.
async fn sql_file_run(conn: &mut sqlx::MySqlConnection, path: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    let code: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    for statement in code.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        sqlx::Executor::execute(&mut *conn, statement)
            .await
            .unwrap_or_else(|e| panic!("{path}: {statement}: {e}"));
    }
}

/// Runs the rollback files (under docs/sql/, in order) and checks that
/// they leave the jobs table `before` describes, the schema history at
/// `version`, and the table's `rows` rows.
async fn rolled_back(
    conn: &mut sqlx::MySqlConnection,
    files: &[&str],
    before: &[String],
    version: i32,
    rows: i64,
) {
    let root = env!("CARGO_MANIFEST_DIR");
    for file in files {
        sql_file_run(conn, &format!("{root}/docs/sql/{file}")).await;
    }
    assert_eq!(jobs_definition(conn).await, before);
    assert_eq!(schema_version(conn).await, version);
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(left, rows, "the rows stay");
}

/// docs/upgrades.md, "Upgrading a live deployment": the rollback of the
/// hot path's schema leaves the jobs table V26 made, rows and all, and a
/// later `tickler migrate` brings it forward again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_path_schema_rolls_back_to_v26_and_forward_again() {
    let server = tickler_testkit::mysql_server_url();
    let mut admin = sqlx::MySqlConnection::connect(&server).await.unwrap();
    let names = [
        tickler_testkit::unique("tickler_t_"),
        tickler_testkit::unique("tickler_t_"),
    ];
    for name in &names {
        sqlx::Executor::execute(&mut admin, format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap();
    }
    let [v26_url, url] = names.clone().map(|name| format!("{server}/{name}"));
    migrate_to(&v26_url, Some(26));
    let mut v26 = sqlx::MySqlConnection::connect(&v26_url).await.unwrap();
    assert_eq!(schema_version(&mut v26).await, 26, "--to stops at 26");
    let v26_definition = jobs_definition(&mut v26).await;

    // The hot path's upgrade, V26 to V29, is what the rollback undoes (a
    // later migration is rolled back first: docs/upgrades.md).
    migrate_to(&url, Some(29));
    let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let latest = jobs_definition(&mut conn).await;
    assert_ne!(latest, v26_definition);
    sqlx::query(
        "INSERT INTO jobs (topic, payload, schedule_time) VALUES ('t', 'p', UTC_TIMESTAMP(3))",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    rolled_back(
        &mut conn,
        &["rollback-hot-path-1.sql", "rollback-hot-path-2.sql"],
        &v26_definition,
        26,
        1,
    )
    .await;

    migrate_to(&url, Some(29));
    assert_eq!(jobs_definition(&mut conn).await, latest, "forward again");
    migrate_to(&url, None);
    conn.close().await.unwrap();
    v26.close().await.unwrap();
    for name in &names {
        sqlx::Executor::execute(&mut admin, format!("DROP DATABASE {name}").as_str())
            .await
            .unwrap();
    }
}

/// A migration on a live table waits for the table's metadata lock behind
/// every query already running on it, and every query after it waits
/// behind the migration: one long report would stop dispatch for as long
/// as it runs. The migrator gives up waiting after a few seconds, lets the
/// queue through and tries again.
#[tokio::test]
async fn a_migration_behind_a_long_query_does_not_hold_up_the_queries_after_it() {
    let (mut admin, name, url) = database_empty().await;
    migrate_to(&url, Some(26));

    // The long query: a transaction that read the table and stays open
    // holds its metadata lock as a long SELECT would.
    let mut report = sqlx::MySqlConnection::connect(&url).await.unwrap();
    sqlx::Executor::execute(&mut report, "BEGIN").await.unwrap();
    sqlx::Executor::execute(&mut report, "SELECT COUNT(*) FROM jobs")
        .await
        .unwrap();
    let migration = tokio::task::spawn_blocking({
        let url = url.clone();
        move || migrate_to(&url, Some(27))
    });
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;

    // A create while the migration waits: it gets through while the long
    // query is still open, not after it.
    let mut app = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let insert = sqlx::query(
        "INSERT INTO jobs (topic, payload, schedule_time) VALUES ('t', 'p', UTC_TIMESTAMP(3))",
    )
    .execute(&mut app);
    let through = tokio::time::timeout(std::time::Duration::from_secs(30), insert).await;
    assert!(
        matches!(through, Ok(Ok(_))),
        "a create behind a waiting migration runs while the long query is open: {through:?}"
    );
    assert!(!migration.is_finished(), "the migration still waits");

    sqlx::Executor::execute(&mut report, "COMMIT")
        .await
        .unwrap();
    migration.await.unwrap();
    assert_eq!(schema_version(&mut app).await, 27, "then it is applied");
    app.close().await.unwrap();
    report.close().await.unwrap();
    sqlx::Executor::execute(&mut admin, format!("DROP DATABASE {name}").as_str())
        .await
        .unwrap();
}

/// Records an instance serving now, built for the schema its `version`
/// names (none: a version from before instances said it).
async fn instance_serving(conn: &mut sqlx::MySqlConnection, host: &str, version: &str) {
    sqlx::query(
        "INSERT INTO instances (host, pid, version, roles, started_at, heartbeat_at) \
         VALUES (?, 4242, ?, 'api', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))",
    )
    .bind(host)
    .bind(version)
    .execute(&mut *conn)
    .await
    .unwrap();
}

/// The instance on `host` rolled out: built for the newest schema.
async fn instance_rolled_out(conn: &mut sqlx::MySqlConnection, host: &str) {
    sqlx::query("UPDATE instances SET version = ? WHERE host = ?")
        .bind(format!("0.1.0+schema.{}", tickler::store::schema_newest()))
        .bind(host)
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// `tickler migrate` to the newest, expected to be refused: its stderr.
fn migrate_refused(url: &str) -> String {
    let refused = Command::new(tickler_bin())
        .arg("migrate")
        .env("TICKLER_MYSQL_URL", url)
        .output()
        .expect("tickler runs");
    assert!(!refused.status.success(), "refused");
    String::from_utf8_lossy(&refused.stderr).into_owned()
}

/// docs/upgrades.md, "Upgrading a live deployment": V33 takes away the
/// column the versions before it read, so `tickler migrate` applies it only
/// once no instance built before it serves; the rollback of V31–V33 leaves
/// the jobs table V30 made, and a later `migrate` brings it forward again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_that_takes_away_what_a_serving_version_reads_waits_for_it_to_go() {
    let (mut admin, name, url) = database_empty().await;
    migrate_to(&url, Some(30));
    let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let v30_definition = jobs_definition(&mut conn).await;
    // An instance of a version from before instances said their schema.
    instance_serving(&mut conn, "old-host", "0.1.0").await;

    // What it can run beside is applied; V33 is refused, naming it.
    migrate_to(&url, Some(32));
    let stderr = migrate_refused(&url);
    assert!(
        stderr.contains("V33") && stderr.contains("old-host") && stderr.contains("--to 32"),
        "{stderr}"
    );
    assert_eq!(
        schema_version(&mut conn).await,
        32,
        "nothing of V33 applied"
    );

    // Rolled out: the instance says it was built for the newest schema.
    instance_rolled_out(&mut conn, "old-host").await;
    migrate_to(&url, Some(33));
    assert_eq!(schema_version(&mut conn).await, 33);
    let latest = jobs_definition(&mut conn).await;
    assert!(
        latest.iter().any(|line| line.contains("ix_jobs_changed"))
            && !latest.iter().any(|line| line.contains("edited_at")),
        "{latest:?}"
    );

    // The rollback, with no migration after V33 yet (a later one is
    // rolled back first: docs/upgrades.md).
    rolled_back(
        &mut conn,
        &["rollback-changed-1.sql", "rollback-changed-2.sql"],
        &v30_definition,
        30,
        0,
    )
    .await;
    migrate_to(&url, Some(33));
    assert_eq!(jobs_definition(&mut conn).await, latest, "forward again");

    conn.close().await.unwrap();
    sqlx::Executor::execute(&mut admin, format!("DROP DATABASE {name}").as_str())
        .await
        .unwrap();
}

/// docs/upgrades.md, "Upgrading a live deployment": V36 drops the three
/// indexes V35's one replaces, so it waits until no instance built before
/// it serves; the rollback of V34–V36 leaves the jobs table V33 made, rows
/// and all, and a later `migrate` brings it forward again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_path_index_upgrades_in_two_steps_and_rolls_back() {
    let (mut admin, name, url) = database_empty().await;
    migrate_to(&url, Some(33));
    let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let v33_definition = jobs_definition(&mut conn).await;
    instance_serving(&mut conn, "v33-host", "0.1.0+schema.33").await;
    sqlx::query(
        "INSERT INTO jobs (topic, payload, schedule_time) VALUES ('t', 'p', UTC_TIMESTAMP(3))",
    )
    .execute(&mut conn)
    .await
    .unwrap();

    // V34 and V35 run beside the version built for V33; V36 waits for it.
    migrate_to(&url, Some(35));
    let stderr = migrate_refused(&url);
    assert!(
        stderr.contains("V36") && stderr.contains("v33-host") && stderr.contains("--to 35"),
        "{stderr}"
    );
    assert_eq!(
        schema_version(&mut conn).await,
        35,
        "nothing of V36 applied"
    );
    let both = jobs_definition(&mut conn).await;
    for index in [
        "ix_jobs_status_at",
        "ix_jobs_status_topic",
        "ix_jobs_live",
        "ix_jobs_finished",
    ] {
        assert!(
            both.iter().any(|line| line.contains(index)),
            "{index}: {both:?}"
        );
    }

    instance_rolled_out(&mut conn, "v33-host").await;
    migrate_to(&url, Some(36));
    let latest = jobs_definition(&mut conn).await;
    assert!(latest.iter().any(|line| line.contains("ix_jobs_status_at")));
    for gone in ["ix_jobs_status_topic", "ix_jobs_live", "ix_jobs_finished"] {
        assert!(
            !latest.iter().any(|line| line.contains(gone)),
            "{gone}: {latest:?}"
        );
    }
    // The pending job is found in the new index's due range.
    let due: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM jobs WHERE status = 'pending' AND status_at <= UTC_TIMESTAMP(3)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(due, 1);

    rolled_back(
        &mut conn,
        &["rollback-status-at-1.sql", "rollback-status-at-2.sql"],
        &v33_definition,
        33,
        1,
    )
    .await;
    migrate_to(&url, Some(36));
    assert_eq!(jobs_definition(&mut conn).await, latest, "forward again");

    conn.close().await.unwrap();
    sqlx::Executor::execute(&mut admin, format!("DROP DATABASE {name}").as_str())
        .await
        .unwrap();
}

/// A row's `claim_token`, `claimed_by`, `claimed_at` and
/// `claim_expires_at` (the times as text).
type ClaimColumns = (Option<u64>, Option<u64>, Option<String>, Option<String>);

/// docs/upgrades.md, "Claim columns that never change size": V37 only
/// sets defaults (instant), so rows from before it keep their NULLs and
/// rows after it, a hand-written INSERT's too, hold the placeholders; the
/// rollback leaves the table V36 made, rows and all, and a later `migrate`
/// brings it forward again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_placeholders_are_defaults_set_instantly_and_roll_back() {
    let (mut admin, name, url) = database_empty().await;
    migrate_to(&url, Some(36));
    let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let v36_definition = jobs_definition(&mut conn).await;
    let insert =
        "INSERT INTO jobs (topic, payload, schedule_time) VALUES ('t', 'p', UTC_TIMESTAMP(3))";
    sqlx::query(insert).execute(&mut conn).await.unwrap();

    migrate_to(&url, Some(37));
    assert_eq!(schema_version(&mut conn).await, 37);
    let latest = jobs_definition(&mut conn).await;
    sqlx::query(insert).execute(&mut conn).await.unwrap();
    let claims: Vec<ClaimColumns> = sqlx::query_as(
        "SELECT claim_token, claimed_by, CAST(claimed_at AS CHAR), \
             CAST(claim_expires_at AS CHAR) FROM jobs ORDER BY created_at, id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let epoch = Some("1970-01-01 00:00:00.000".to_owned());
    assert_eq!(
        claims,
        [
            (None, None, None, None),
            (Some(0), Some(0), epoch.clone(), epoch)
        ]
    );

    rolled_back(
        &mut conn,
        &["rollback-claim-placeholders.sql"],
        &v36_definition,
        36,
        2,
    )
    .await;
    migrate_to(&url, Some(37));
    assert_eq!(jobs_definition(&mut conn).await, latest, "forward again");

    conn.close().await.unwrap();
    sqlx::Executor::execute(&mut admin, format!("DROP DATABASE {name}").as_str())
        .await
        .unwrap();
}

/// The triggers on the database's `jobs` table, by name.
async fn jobs_triggers(url: &str) -> Vec<String> {
    let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
    let names = sqlx::query_scalar(
        "SELECT CAST(TRIGGER_NAME AS CHAR) FROM information_schema.TRIGGERS \
         WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'jobs' ORDER BY TRIGGER_NAME",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    names
}

#[tokio::test]
async fn migrate_installs_no_hand_edit_trigger_by_default_and_keeps_those_it_finds() {
    let (mut admin, name, url) = database_empty().await;
    let both = ["jobs_hand_edited", "jobs_hand_inserted"].map(String::from);
    let default_migrate = || {
        let output = Command::new(tickler_bin())
            .arg("migrate")
            .env("TICKLER_MYSQL_URL", &url)
            .env_remove("TICKLER_MYSQL_HISTORY_HAND_EDITS")
            .output()
            .expect("tickler runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };

    // A new database: the claims and marks are spared the triggers.
    let said = default_migrate();
    assert!(
        said.contains("hand edits in SQL are not recorded"),
        "{said}"
    );
    assert_eq!(jobs_triggers(&url).await, Vec::<String>::new());

    // Installed on purpose (or by an earlier version's default): kept.
    migrate(&url, "trigger");
    assert_eq!(jobs_triggers(&url).await, both);
    let said = default_migrate();
    assert!(said.contains("are kept"), "{said}");
    assert_eq!(jobs_triggers(&url).await, both);

    migrate(&url, "off");
    assert_eq!(jobs_triggers(&url).await, Vec::<String>::new());

    sqlx::Executor::execute(&mut admin, format!("DROP DATABASE {name}").as_str())
        .await
        .unwrap();
}

/// A starting MariaDB deletes every `#sql*` file in its tmpdir. The test
/// servers keep their own, or each start would delete the temporary tables
/// the shared server is using for other tests at that moment (a migrate in
/// CI once failed so: "Error on delete of '/tmp/#sql-temptable-…'").
#[tokio::test]
async fn a_test_server_starting_leaves_the_shared_tmpdir_alone() {
    let probe = std::env::temp_dir().join(format!(
        "#sql-tickler-probe-{}-{}.MAI",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::write(&probe, b"").unwrap();
    let mariadb = PrivateMariadb::start().await;
    let kept = probe.exists();
    let _ = std::fs::remove_file(&probe);
    drop(mariadb);
    assert!(kept, "starting a test server deleted {}", probe.display());
}

/// An upgrade past V52 fills `enc_keys_used` with the keys rows were
/// already sealed under (by a read that locks nothing), so the doctor's
/// `keys` check knows them without reading the table; once, and not
/// again on a later `migrate`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_rows_were_sealed_under_are_filled_in_once() {
    let (mut admin, name, url) = database_empty().await;
    migrate_to(&url, Some(51));
    let mut conn = sqlx::MySqlConnection::connect(&url).await.unwrap();
    for (key, topic) in [("old", "a"), ("old", "b"), ("k2", "c")] {
        sqlx::query(
            "INSERT INTO jobs (topic, payload, schedule_time, enc_key) \
             VALUES (?, 'x', UTC_TIMESTAMP(3), ?)",
        )
        .bind(topic)
        .bind(key)
        .execute(&mut conn)
        .await
        .unwrap();
    }
    migrate_to(&url, None);
    assert_eq!(enc_keys_used(&mut conn).await, ["k2", "old"]);
    assert_eq!(
        schema_version(&mut conn).await,
        tickler::store::schema_newest()
    );
    // Filled once: a key forgotten since stays forgotten.
    sqlx::query("DELETE FROM enc_keys_used WHERE key_id = 'old'")
        .execute(&mut conn)
        .await
        .unwrap();
    migrate_to(&url, None);
    assert_eq!(enc_keys_used(&mut conn).await, ["k2"]);
    drop(conn);
    sqlx::Executor::execute(&mut admin, format!("DROP DATABASE {name}").as_str())
        .await
        .unwrap();
}

async fn enc_keys_used(conn: &mut sqlx::MySqlConnection) -> Vec<String> {
    sqlx::query_scalar("SELECT CAST(key_id AS CHAR) FROM enc_keys_used ORDER BY key_id")
        .fetch_all(conn)
        .await
        .unwrap()
}
