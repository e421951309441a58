//! What this machine does without tickler, measured in the same run, so a
//! figure can be read on another machine: the CPU, MariaDB's bare
//! multi-row INSERT and UPDATE-by-id rates, and the bare producer's rate.
//! A burst figure 20 % lower beside a reference 20 % lower is a slower
//! machine, not a regression.

use std::time::Instant;

use anyhow::Context;
use sqlx::{Connection, Executor, MySqlConnection, QueryBuilder};
use tickler::config::Config;
use tickler::kafka;

/// Rows a reference statement writes.
const ROWS: usize = 1_000;

/// The CPU's model name (Linux `/proc/cpuinfo`), and the cores this
/// process may use.
pub(super) fn cpu() -> (String, usize) {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    (model, cores)
}

/// MariaDB alone: (rows inserted a second, rows updated by id a second),
/// `statements` statements of [`ROWS`] rows each, each its own
/// transaction, into a scratch table of the bench's database.
pub(super) async fn database(mysql_url: &str, statements: usize) -> anyhow::Result<(f64, f64)> {
    let mut conn = MySqlConnection::connect(mysql_url)
        .await
        .context("reference: connecting to MySQL")?;
    conn.execute(
        "CREATE TABLE bench_reference (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, \
         k VARBINARY(64) NOT NULL, v BLOB NOT NULL, t DATETIME(3) NOT NULL, \
         s TINYINT NOT NULL DEFAULT 0, PRIMARY KEY (id), KEY (s, t)) ENGINE = InnoDB",
    )
    .await?;
    let payload = vec![b'x'; 200];
    let started = Instant::now();
    let mut ids = Vec::with_capacity(statements);
    for n in 0..statements {
        let mut insert = QueryBuilder::new("INSERT INTO bench_reference (k, v, t) ");
        insert.push_values(0..ROWS, |mut row, i| {
            row.push_bind(format!("k{n}-{i}"))
                .push_bind(&payload[..])
                .push("UTC_TIMESTAMP(3)");
        });
        let first = insert.build().execute(&mut conn).await?.last_insert_id();
        ids.push(first);
    }
    let inserted = (statements * ROWS) as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    for first in ids {
        let mut update = QueryBuilder::new("UPDATE bench_reference SET s = 1 WHERE id IN (");
        let mut list = update.separated(", ");
        // id-order: one multi-row INSERT's ids are consecutive on InnoDB
        // with innodb_autoinc_lock_mode 1 (this bench's MariaDB); a miss
        // only updates fewer rows.
        for id in first..first + ROWS as u64 {
            list.push_bind(id);
        }
        update.push(")");
        update.build().execute(&mut conn).await?;
    }
    let updated = (statements * ROWS) as f64 / started.elapsed().as_secs_f64();
    conn.execute("DROP TABLE bench_reference").await?;
    Ok((inserted, updated))
}

/// The producer alone: records of 200 bytes a second to `topic`, `count`
/// of them sent as fast as they go and all acknowledged.
pub(super) async fn producer(config: &Config, topic: &str, count: usize) -> anyhow::Result<f64> {
    let producer = kafka::Producer::create(
        &config.kafka.brokers,
        &config.kafka.options,
        config.kafka.linger_ms,
        config.kafka.message_timeout_ms,
    )?;
    producer
        .send(kafka::Record::to(topic, 0).key(b"warm-up").value(b"{}"))?
        .await
        .map_err(|err| anyhow::anyhow!("reference: warm-up record not produced: {err}"))?;
    let value = vec![b'x'; 200];
    let started = Instant::now();
    let mut deliveries = Vec::with_capacity(count);
    for n in 0..count {
        let key = n.to_string();
        let record = kafka::Record::to(topic, 0)
            .key(key.as_bytes())
            .value(&value);
        deliveries.push(producer.send(record)?);
    }
    for delivery in deliveries {
        delivery
            .await
            .map_err(|err| anyhow::anyhow!("reference: a record was not produced: {err}"))?;
    }
    Ok(count as f64 / started.elapsed().as_secs_f64())
}
