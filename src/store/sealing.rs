//! Encryption at rest, as the store does it beyond a job's own write and
//! read (jobs.rs, job_row.rs): which keys the rows are sealed under, and
//! `tickler keys rotate`, which seals every row again under the active
//! key, a batch at a time, from where it last stopped.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::Row;

use super::error::StoreError;
use super::handle::Store;
use super::job_row::text;
use crate::domain::job::JobId;
use crate::domain::keys::Part;

/// Rows of `jobs` by the key they are sealed under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCount {
    /// None: stored plain.
    pub key: Option<String>,
    pub rows: u64,
}

/// Where a rotation toward a key stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Every job up to this id has been seen.
    pub after_id: JobId,
    /// Sealed again under the key, in all.
    pub rewritten: u64,
    /// Left as they were: under a key this instance does not have, or
    /// not opening.
    pub skipped: u64,
    /// Whether no job past `after_id` is left to see.
    pub done: bool,
}

/// A key rows are sealed under, by `enc_keys_used`: when a process first
/// and last said it seals with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUsed {
    pub key: String,
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
}

/// The first schema whose binaries open sealed rows (V49 added `enc_key`):
/// an instance built for an older one sends a sealed payload as it is
/// stored, so nothing is sealed while one is live.
pub const SCHEMA: i32 = 49;

/// Whether a live instance described by `version` and `enc_keys` (its
/// `instances` row) holds key `key`, or may: one built after sealing but
/// before instances said which keys they hold (V54) is given the benefit
/// of the doubt.
pub fn instance_may_hold(version: &str, enc_keys: Option<&[String]>, key: &str) -> bool {
    match enc_keys {
        Some(ids) => ids.iter().any(|id| id == key),
        None => super::migrate::built_for(version) >= SCHEMA,
    }
}

impl Store {
    /// Checks every key this handle holds against its canary in
    /// `enc_key_canaries`, writing the canary of a key id that has none
    /// (the first process to hold it). Returns the ids of the keys that
    /// do not open theirs: the same id with other key material, which
    /// would set aside every row the other material sealed.
    pub async fn key_canaries_check(&self) -> Result<Vec<String>, StoreError> {
        let mut wrong = Vec::new();
        if self.keys.ids().is_empty() {
            return Ok(wrong);
        }
        let used: Vec<String> = self.keys_used().await?.into_iter().map(|k| k.key).collect();
        for key in self.keys.ids() {
            let Some(made) = self.keys.canary_seal(&key) else {
                continue;
            };
            let known: Option<Vec<u8>> =
                sqlx::query_scalar("SELECT sealed FROM enc_key_canaries WHERE key_id = ?")
                    .bind(&key)
                    .fetch_optional(&self.pool)
                    .await?;
            // The first to hold an id since canaries exist (an upgrade):
            // its key must open rows already sealed under that id, or it
            // would set a wrong canary for every right key after it.
            if known.is_none() && used.contains(&key) && !self.key_opens_its_rows(&key).await? {
                wrong.push(key);
                continue;
            }
            // Two processes starting at once: one canary wins, and the
            // other checks its key against it.
            sqlx::query(
                "INSERT INTO enc_key_canaries (key_id, sealed, created_at) \
                 VALUES (?, ?, UTC_TIMESTAMP(3)) ON DUPLICATE KEY UPDATE key_id = key_id",
            )
            .bind(&key)
            .bind(&made)
            .execute(&self.pool)
            .await?;
            let stored: Option<Vec<u8>> =
                sqlx::query_scalar("SELECT sealed FROM enc_key_canaries WHERE key_id = ?")
                    .bind(&key)
                    .fetch_optional(&self.pool)
                    .await?;
            if !stored.is_some_and(|sealed| self.keys.canary_opens(&key, &sealed)) {
                wrong.push(key);
            }
        }
        Ok(wrong)
    }

    /// Whether `key` opens a few of the jobs sealed under it (true when
    /// none is found, or one opens: a row damaged by hand does not make a
    /// right key wrong). A scan of `jobs` until it finds them (no index on
    /// `enc_key`): once per key id, at the first start that holds it.
    async fn key_opens_its_rows(&self, key: &str) -> Result<bool, StoreError> {
        let rows = sqlx::query(
            "SELECT id, payload, headers, enc_key FROM jobs \
             WHERE enc_key = ? AND LENGTH(payload) > 0 LIMIT 3",
        )
        .bind(key)
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            return Ok(true);
        }
        for row in &rows {
            let id: u64 = row.try_get("id")?;
            if self.reopened(row, id, crate::domain::keys::JOB)?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether a live dispatching instance (by each one's own TTL, `ttl`
    /// for those that name none) holds key `key`, or may (see
    /// [`instance_may_hold`]): one that will claim a row sealed under it.
    pub async fn key_held_live(
        &self,
        key: &str,
        ttl: std::time::Duration,
    ) -> Result<bool, StoreError> {
        Ok(self
            .instances_list(ttl)
            .await?
            .iter()
            .filter(|row| row.live && row.has_role(crate::config::Role::Dispatcher))
            .any(|row| instance_may_hold(&row.version, row.enc_keys.as_deref(), key)))
    }

    /// Notes that this handle seals with its active key (none: nothing to
    /// note): at a process's start and every few minutes while it runs.
    pub async fn key_used_note(&self) -> Result<(), StoreError> {
        let keys = self.keys.sealing();
        let Some(active) = keys.active() else {
            return Ok(());
        };
        sqlx::query(
            "INSERT INTO enc_keys_used (key_id, first_at, last_at) \
             VALUES (?, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3)) \
             ON DUPLICATE KEY UPDATE last_at = UTC_TIMESTAMP(3)",
        )
        .bind(active)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The keys rows may be sealed under (`enc_keys_used`): a few rows,
    /// whatever the size of `jobs`.
    pub async fn keys_used(&self) -> Result<Vec<KeyUsed>, StoreError> {
        let rows: Vec<(String, NaiveDateTime, NaiveDateTime)> = sqlx::query_as(
            "SELECT CAST(key_id AS CHAR), first_at, last_at FROM enc_keys_used ORDER BY key_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(key, first_at, last_at)| KeyUsed {
                key,
                first_at: first_at.and_utc(),
                last_at: last_at.and_utc(),
            })
            .collect())
    }

    /// Whether any job or schedule is sealed under `key` (a scan of both
    /// tables: for the end of a rotation, before its key is forgotten).
    pub async fn key_rows_exist(&self, key: &str) -> Result<bool, StoreError> {
        let found: i64 = sqlx::query_scalar(
            "SELECT (EXISTS (SELECT 1 FROM jobs WHERE enc_key = ?) \
             OR EXISTS (SELECT 1 FROM schedules WHERE enc_key = ?)) + 0",
        )
        .bind(key)
        .bind(key)
        .fetch_one(&self.pool)
        .await?;
        Ok(found != 0)
    }

    /// Forgets key `key` in `enc_keys_used` if no process has said it
    /// seals with it since `since`.
    pub async fn key_used_forget(
        &self,
        key: &str,
        since: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        Ok(
            sqlx::query("DELETE FROM enc_keys_used WHERE key_id = ? AND last_at < ?")
                .bind(key)
                .bind(super::sql::db_time(since))
                .execute(&self.pool)
                .await?
                .rows_affected(),
        )
    }

    /// Rows of jobs and schedules by the key they are sealed under (a
    /// full scan: for `tickler keys status`).
    pub async fn key_counts(&self) -> Result<Vec<KeyCount>, StoreError> {
        let rows = sqlx::query(
            "SELECT enc_key, CAST(SUM(n) AS SIGNED) AS n FROM ( \
             SELECT enc_key, COUNT(*) AS n FROM jobs GROUP BY enc_key \
             UNION ALL SELECT enc_key, COUNT(*) AS n FROM schedules GROUP BY enc_key) k \
             GROUP BY enc_key ORDER BY enc_key",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(KeyCount {
                    key: text(row, "enc_key")?,
                    rows: u64::try_from(row.try_get::<i64, _>("n")?).unwrap_or(0),
                })
            })
            .collect()
    }

    /// Where the rotation toward the active key stands (a fresh one from 0).
    pub async fn rotation(&self) -> Result<Rotation, StoreError> {
        let Some(active) = self.keys.active() else {
            return Ok(Rotation::default());
        };
        let row = sqlx::query(
            "SELECT after_id, rewritten, skipped FROM key_rotation WHERE target_key = ?",
        )
        .bind(active)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            None => Rotation::default(),
            Some(row) => Rotation {
                after_id: row.try_get("after_id")?,
                rewritten: row.try_get("rewritten")?,
                skipped: row.try_get("skipped")?,
                done: false,
            },
        })
    }

    /// Starts the rotation toward the active key over from the first job.
    pub async fn rotation_restart(&self) -> Result<(), StoreError> {
        if let Some(active) = self.keys.active() {
            sqlx::query("DELETE FROM key_rotation WHERE target_key = ?")
                .bind(active)
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// Seals every schedule not yet under the active key again under it
    /// (there are few: all at once, each only if it did not change
    /// meanwhile). Returns (rewritten, skipped).
    pub async fn schedules_reseal(&self) -> Result<(u64, u64), StoreError> {
        let Some(active) = self.keys.active().map(str::to_owned) else {
            return Ok((0, 0));
        };
        let rows = sqlx::query(
            "SELECT id, version, payload, headers, enc_key FROM schedules \
             WHERE enc_key IS NULL OR enc_key <> ?",
        )
        .bind(&active)
        .fetch_all(&self.pool)
        .await?;
        let (mut rewritten, mut skipped) = (0, 0u64);
        for row in &rows {
            let id: u64 = row.try_get("id")?;
            let version: u32 = row.try_get("version")?;
            let parts = crate::domain::keys::SCHEDULE;
            let Some((payload, headers)) = self.reopened(row, id, parts)? else {
                skipped += 1;
                continue;
            };
            let (payload, headers) = self.resealed(id, parts, &payload, headers);
            let before = rewritten;
            rewritten += sqlx::query(
                "UPDATE schedules SET payload = ?, headers = ?, enc_key = ?, \
                 updated_at = updated_at WHERE id = ? AND version = ?",
            )
            .bind(payload)
            .bind(headers)
            .bind(&active)
            .bind(id)
            .bind(version)
            .execute(&self.pool)
            .await?
            .rows_affected();
            if rewritten == before {
                // Changed under the rotation (see `rotation_step`).
                skipped += 1;
            }
        }
        Ok((rewritten, skipped))
    }

    /// A row's payload and headers opened (None: it does not open here).
    fn reopened(
        &self,
        row: &sqlx::mysql::MySqlRow,
        id: u64,
        parts: (Part, Part),
    ) -> Result<Option<(Vec<u8>, Option<String>)>, StoreError> {
        let key = text(row, "enc_key")?;
        let payload: Vec<u8> = row.try_get("payload")?;
        Ok(self
            .keys
            .open_row(
                key.as_deref(),
                id,
                parts,
                Some(payload),
                text(row, "headers")?,
            )
            .ok())
    }

    /// A payload and headers sealed for row `id` under the active key.
    fn resealed(
        &self,
        id: u64,
        parts: (Part, Part),
        payload: &[u8],
        headers: Option<String>,
    ) -> (Vec<u8>, Option<String>) {
        let (payload, headers, _) = self.keys.seal_row(id, parts, payload, headers.as_deref());
        (payload, headers)
    }

    /// Seals the next `limit` jobs not yet under the active key (plain,
    /// or under another key this handle has) again under it, from where
    /// the rotation stands; records the new position. Each row is written
    /// only if it did not change meanwhile (its `version`); one that did is
    /// sealed under the active key by that change already, or is met again
    /// by a later rotation. `updated_at` and `version` are kept: a rotated
    /// row is not a changed job.
    pub async fn rotation_step(&self, limit: u32) -> Result<Rotation, StoreError> {
        let Some(active) = self.keys.active().map(str::to_owned) else {
            return Err(StoreError::MigrationRefused(
                "no encryption.active_key: nothing to rotate to".to_owned(),
            ));
        };
        let mut at = self.rotation().await?;
        // id-order: a cursor over every row by its id, any engine's ids: a
        // row created after the rotation passed its id is sealed under the
        // active key already, as its create wrote it. Each step reads the
        // next `limit` rows whatever their key (a bounded range of the
        // primary key), the payloads only of those still to seal.
        let rows = sqlx::query(
            "SELECT id, version, enc_key, IF(enc_key <=> ?, '', payload) AS payload, \
             IF(enc_key <=> ?, NULL, headers) AS headers \
             FROM jobs WHERE id > ? ORDER BY id LIMIT ?",
        )
        .bind(&active)
        .bind(&active)
        .bind(at.after_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        at.done = rows.len() < limit as usize;
        for row in &rows {
            let id: JobId = row.try_get("id")?;
            let version: u32 = row.try_get("version")?;
            at.after_id = id;
            if text(row, "enc_key")?.as_deref() == Some(active.as_str()) {
                continue;
            }
            let parts = crate::domain::keys::JOB;
            let Some((payload, headers)) = self.reopened(row, id, parts)? else {
                at.skipped += 1;
                continue;
            };
            let (sealed_payload, sealed_headers) = self.resealed(id, parts, &payload, headers);
            let written = sqlx::query(
                "UPDATE jobs SET payload = ?, headers = ?, enc_key = ?, updated_at = updated_at \
                 WHERE id = ? AND version = ?",
            )
            .bind(sealed_payload)
            .bind(sealed_headers)
            .bind(&active)
            .bind(id)
            .bind(version)
            .execute(&self.pool)
            .await?
            .rows_affected();
            at.rewritten += written;
            // Changed under the rotation: its change sealed it under the
            // key its writer held, maybe not this one. Counted skipped, so
            // the old keys are not forgotten on its word; a rotation run
            // again meets it.
            if written == 0 {
                at.skipped += 1;
            }
        }
        sqlx::query(
            "INSERT INTO key_rotation (target_key, after_id, rewritten, skipped, updated_at) \
             VALUES (?, ?, ?, ?, UTC_TIMESTAMP(3)) ON DUPLICATE KEY UPDATE \
             after_id = VALUES(after_id), rewritten = VALUES(rewritten), \
             skipped = VALUES(skipped), updated_at = VALUES(updated_at)",
        )
        .bind(&active)
        .bind(at.after_id)
        .bind(at.rewritten)
        .bind(at.skipped)
        .execute(&self.pool)
        .await?;
        Ok(at)
    }
}
