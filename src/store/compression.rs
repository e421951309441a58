//! Payload compression, as the store does it beyond a job's own write and
//! read (jobs.rs, job_row.rs): the dictionaries in `payload_dicts`, loading
//! them into the codec, training one on a sample of payloads, and how
//! well the newest rows compress.

use std::collections::HashSet;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::cluster::InstanceRow;
use super::error::StoreError;
use super::handle::Store;
use super::job_row::{job_from_row, JOB_COLUMNS};
use super::migrate::built_for;
use super::sql::push_id_list;

/// A dictionary, without its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DictInfo {
    pub id: u16,
    pub bytes: u64,
    pub samples: u32,
    pub sample_bytes: u64,
    pub created_at: DateTime<Utc>,
}

/// Payloads to train a dictionary on ([`Store::payload_samples`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PayloadSamples {
    /// The plain rows' payloads, as given.
    pub payloads: Vec<Vec<u8>>,
    /// Rows passed over because they are sealed (encryption at rest).
    pub sealed: u32,
}

/// How the newest rows are stored: their payloads' bytes as given and as
/// stored, and how many are compressed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompressionSample {
    pub rows: u64,
    pub compressed: u64,
    pub plain_bytes: u64,
    pub stored_bytes: u64,
}

impl Store {
    /// The live instances (heartbeat within `ttl`) built before
    /// compression (schema [`crate::domain::compression::SCHEMA`]): they cannot
    /// read a compressed payload, and would set its job aside.
    pub async fn instances_unable_to_expand(
        &self,
        ttl: std::time::Duration,
    ) -> Result<Vec<InstanceRow>, StoreError> {
        Ok(self
            .instances_list(ttl)
            .await?
            .into_iter()
            .filter(|row| row.live && built_for(&row.version) < crate::domain::compression::SCHEMA)
            .collect())
    }

    /// Loads the dictionaries this handle's codec does not know yet, and
    /// tells it the newest. A few rows' read when nothing is new.
    pub async fn dicts_refresh(&self) -> Result<(), StoreError> {
        // id-order: ids only name dictionaries; the newest is by created_at.
        let listed: Vec<(u16, i64)> = sqlx::query_as(
            "SELECT id, TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(3)) \
             FROM payload_dicts ORDER BY created_at DESC, id DESC",
        )
        .fetch_all(&self.pool)
        .await?;
        let ids: Vec<u16> = listed.iter().map(|(id, _)| *id).collect();
        let known: HashSet<u16> = self.codec.dict_ids().into_iter().collect();
        let missing: Vec<u64> = ids
            .iter()
            .filter(|id| !known.contains(id))
            .map(|id| u64::from(*id))
            .collect();
        let mut found = Vec::new();
        if !missing.is_empty() {
            let mut query =
                QueryBuilder::<MySql>::new("SELECT id, dict FROM payload_dicts WHERE id IN ");
            push_id_list(&mut query, &missing);
            for row in query.build().fetch_all(&self.pool).await? {
                found.push((
                    row.try_get::<u16, _>("id")?,
                    row.try_get::<Vec<u8>, _>("dict")?,
                ));
            }
        }
        let newest = listed.first().map(|(id, age_us)| {
            (
                *id,
                std::time::Duration::from_micros(u64::try_from(*age_us).unwrap_or(0)),
            )
        });
        self.codec.learn(found, newest);
        Ok(())
    }

    /// The dictionaries, newest first.
    pub async fn dicts(&self) -> Result<Vec<DictInfo>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, LENGTH(dict) AS bytes, samples, sample_bytes, created_at \
             FROM payload_dicts ORDER BY created_at DESC, id DESC",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let created_at: NaiveDateTime = row.try_get("created_at")?;
                Ok(DictInfo {
                    id: row.try_get("id")?,
                    bytes: row.try_get::<i64, _>("bytes")?.try_into().unwrap_or(0),
                    samples: row.try_get("samples")?,
                    sample_bytes: row.try_get("sample_bytes")?,
                    created_at: created_at.and_utc(),
                })
            })
            .collect()
    }

    /// The payloads (as given: expanded) of those of the `limit` jobs
    /// created last that are stored plain, to train a dictionary on. Rows
    /// sealed under a key (`enc_key`) are counted and never opened: a
    /// dictionary holds fragments of its samples, and `payload_dicts` is
    /// not sealed, so one trained on sealed payloads would keep them plain
    /// beside their ciphertext. Rows that do not read are left out.
    pub async fn payload_samples(&self, limit: u32) -> Result<PayloadSamples, StoreError> {
        self.dicts_refresh().await?;
        // id-order: a sample of recent rows, not a cursor; any order would do.
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS}, enc_key IS NOT NULL AS sealed FROM jobs ORDER BY id DESC LIMIT ?"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut samples = PayloadSamples::default();
        for row in &rows {
            let sealed: i64 = row.try_get("sealed")?;
            if sealed != 0 {
                samples.sealed += 1;
                continue;
            }
            let Ok(job) = job_from_row(row, &self.keys, &self.codec) else {
                continue;
            };
            if job.payload.len() >= crate::domain::compression::MIN_BYTES {
                samples.payloads.push(job.payload);
            }
        }
        Ok(samples)
    }

    /// Stores a new dictionary; returns its id. Every instance writes with
    /// it once it is ripe ([`crate::domain::compression::RIPE_AFTER`]).
    pub async fn dict_insert(
        &self,
        dict: &[u8],
        samples: u32,
        sample_bytes: u64,
    ) -> Result<u16, StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO payload_dicts (dict, samples, sample_bytes, created_at) \
             VALUES (?, ?, ?, UTC_TIMESTAMP(3))",
        )
        .bind(dict)
        .bind(samples)
        .bind(sample_bytes)
        .execute(&mut *tx)
        .await?;
        let id: u64 = sqlx::query_scalar("SELECT LAST_INSERT_ID()")
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        u16::try_from(id)
            .map_err(|_| StoreError::Corrupt(format!("payload_dicts id {id} is past 65,535")))
    }

    /// How the `limit` jobs created last store their payloads (their
    /// plain sizes read by expanding them).
    pub async fn compression_sample(&self, limit: u32) -> Result<CompressionSample, StoreError> {
        self.dicts_refresh().await?;
        // id-order: a sample of recent rows, not a cursor.
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS}, LENGTH(payload) AS stored, payload_kind LIKE '%+zstd' AS compressed \
             FROM jobs ORDER BY id DESC LIMIT ?"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut sample = CompressionSample::default();
        for row in &rows {
            let Ok(job) = job_from_row(row, &self.keys, &self.codec) else {
                continue;
            };
            let compressed: i64 = row.try_get("compressed")?;
            let stored: i64 = row.try_get("stored")?;
            sample.rows += 1;
            sample.compressed += u64::from(compressed != 0);
            sample.plain_bytes += job.payload.len() as u64;
            sample.stored_bytes += u64::try_from(stored).unwrap_or(0);
        }
        Ok(sample)
    }
}
