//! Encryption at rest of jobs' payloads and headers (`[encryption]`):
//! AES-256-GCM (RustCrypto's `aes-gcm`), under named keys read from files
//! or the environment. Pure logic; the store calls it where a row's
//! payload and headers are written and read.
//!
//! A sealed value is `nonce (12 bytes) ‖ ciphertext ‖ tag (16 bytes)`,
//! with the row's identity as associated data (`tickler:jobs:<id>:payload`
//! or `…:headers`), so a ciphertext copied into another row, or into the
//! other column, does not open. The row names its key in `enc_key`; rows
//! written before encryption was on have none, and stay readable.
//!
//! A key never reaches a log, an error or the API: `Keyring`'s `Debug`
//! names the key ids only, and every error names a key by its id.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;

/// Bytes a sealed value adds to the plain one: nonce and tag.
pub const OVERHEAD: usize = NONCE_LEN + 16;
const NONCE_LEN: usize = 12;

/// Most characters of a key id (`jobs.enc_key` is `VARCHAR(64)`).
pub const KEY_ID_MAX: usize = 64;

/// The keys this process knows, and the one new rows are sealed under.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct Keyring(Arc<Inner>);

#[derive(Default)]
struct Inner {
    active: Option<String>,
    keys: HashMap<String, Aes256Gcm>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids: Vec<&String> = self.0.keys.keys().collect();
        ids.sort();
        f.debug_struct("Keyring")
            .field("active", &self.0.active)
            .field("keys", &ids)
            .finish()
    }
}

/// Why the keyring could not be made, or a value not opened. Names keys by
/// their id, never their bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("encryption key {id:?}: {why}")]
    Source { id: String, why: String },
    #[error("encryption.active_key {0:?} is not among encryption.keys")]
    ActiveUnknown(String),
    #[error("encryption key id {0:?}: 1 to 64 of letters, digits, '.', '_', '-'")]
    BadId(String),
    #[error("sealed under key {0:?}, which this instance does not have (encryption.keys)")]
    Missing(String),
    #[error("does not open under key {0:?}: changed, moved from another row, or another key of that name")]
    Tampered(String),
}

/// Which part of which row a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A job's.
    Payload,
    Headers,
    /// A schedule's (the template of its occurrences).
    SchedulePayload,
    ScheduleHeaders,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Payload => "jobs:{id}:payload",
            Part::Headers => "jobs:{id}:headers",
            Part::SchedulePayload => "schedules:{id}:payload",
            Part::ScheduleHeaders => "schedules:{id}:headers",
        }
    }
}

/// The associated data of row `id`'s `part`: the table, the row's identity
/// and the column.
fn aad(id: u64, part: Part) -> Vec<u8> {
    format!("tickler:{}", part.name().replace("{id}", &id.to_string())).into_bytes()
}

impl Keyring {
    /// No keys: nothing is sealed, and a sealed row does not open.
    pub fn none() -> Keyring {
        Keyring::default()
    }

    /// From key ids and their 32 bytes; `active` seals new rows.
    pub fn from_keys(
        active: Option<&str>,
        keys: impl IntoIterator<Item = (String, [u8; 32])>,
    ) -> Result<Keyring, KeyError> {
        let mut ring = HashMap::new();
        for (id, bytes) in keys {
            id_check(&id)?;
            let cipher = Aes256Gcm::new_from_slice(&bytes).map_err(|_| KeyError::Source {
                id: id.clone(),
                why: "not 32 bytes".to_owned(),
            })?;
            ring.insert(id, cipher);
        }
        if let Some(active) = active {
            if !ring.contains_key(active) {
                return Err(KeyError::ActiveUnknown(active.to_owned()));
            }
        }
        Ok(Keyring(Arc::new(Inner {
            active: active.map(str::to_owned),
            keys: ring,
        })))
    }

    /// From `[encryption]`: each key's source is `file:PATH` (32 raw bytes,
    /// or their standard base64 on one line) or `env:VARIABLE` (base64).
    pub fn load(
        active: Option<&str>,
        sources: &BTreeMap<String, String>,
    ) -> Result<Keyring, KeyError> {
        let mut keys = Vec::with_capacity(sources.len());
        for (id, source) in sources {
            keys.push((id.clone(), key_read(id, source)?));
        }
        Keyring::from_keys(active, keys)
    }

    /// The key new rows are sealed under (None: encryption is off).
    pub fn active(&self) -> Option<&str> {
        self.0.active.as_deref()
    }

    /// Whether this keyring has the key `id`.
    pub fn has(&self, id: &str) -> bool {
        self.0.keys.contains_key(id)
    }

    /// The ids of the keys it has, sorted.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.0.keys.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// `plain` as job `id`'s `part`, sealed under the active key; None
    /// when encryption is off.
    pub fn seal(&self, id: u64, part: Part, plain: &[u8]) -> Option<Vec<u8>> {
        let active = self.0.active.as_ref()?;
        let cipher = &self.0.keys[active];
        let nonce_bytes: [u8; NONCE_LEN] = rand::random();
        let nonce = Nonce::from_slice(&nonce_bytes);
        let sealed = cipher
            .encrypt(
                nonce,
                Payload {
                    msg: plain,
                    aad: &aad(id, part),
                },
            )
            .expect("AES-GCM seals any value below 64 GiB");
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce_bytes);
        out.extend_from_slice(&sealed);
        Some(out)
    }

    /// Opens job `id`'s `part` sealed under `key`.
    pub fn open(&self, key: &str, id: u64, part: Part, sealed: &[u8]) -> Result<Vec<u8>, KeyError> {
        let cipher = self
            .0
            .keys
            .get(key)
            .ok_or_else(|| KeyError::Missing(key.to_owned()))?;
        if sealed.len() < OVERHEAD {
            return Err(KeyError::Tampered(key.to_owned()));
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: body,
                    aad: &aad(id, part),
                },
            )
            .map_err(|_| KeyError::Tampered(key.to_owned()))
    }

    /// Headers as the `headers` column holds them sealed: the sealed JSON,
    /// in standard base64 (the column is text).
    pub fn seal_text(&self, id: u64, part: Part, plain: &str) -> Option<String> {
        self.seal(id, part, plain.as_bytes())
            .map(|sealed| base64::engine::general_purpose::STANDARD.encode(sealed))
    }

    /// Opens what [`Keyring::seal_text`] made.
    pub fn open_text(
        &self,
        key: &str,
        id: u64,
        part: Part,
        sealed: &str,
    ) -> Result<String, KeyError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .map_err(|_| KeyError::Tampered(key.to_owned()))?;
        let plain = self.open(key, id, part, &bytes)?;
        String::from_utf8(plain).map_err(|_| KeyError::Tampered(key.to_owned()))
    }
}

/// A job's two sealed columns, as [`Keyring::open_row`] and
/// [`Keyring::seal_row`] take them.
pub const JOB: (Part, Part) = (Part::Payload, Part::Headers);
/// A schedule's template's two sealed columns.
pub const SCHEDULE: (Part, Part) = (Part::SchedulePayload, Part::ScheduleHeaders);

impl Keyring {
    /// Row `id`'s payload and headers (its text column) as stored, opened
    /// with `key` (None: stored plain, returned as they are). An empty
    /// payload is a listing's placeholder (a sealed one never is): kept.
    pub fn open_row(
        &self,
        key: Option<&str>,
        id: u64,
        parts: (Part, Part),
        payload: Vec<u8>,
        headers: Option<String>,
    ) -> Result<(Vec<u8>, Option<String>), KeyError> {
        let Some(key) = key else {
            return Ok((payload, headers));
        };
        let payload = if payload.is_empty() {
            payload
        } else {
            self.open(key, id, parts.0, &payload)?
        };
        let headers = match headers {
            Some(text) if !text.is_empty() => Some(self.open_text(key, id, parts.1, &text)?),
            other => other,
        };
        Ok((payload, headers))
    }

    /// Row `id`'s payload and headers as they are to be stored:
    /// (payload, headers, key id), sealed under the active key, or plain
    /// (key None) when encryption is off.
    pub fn seal_row(
        &self,
        id: u64,
        parts: (Part, Part),
        payload: &[u8],
        headers: Option<&str>,
    ) -> (Vec<u8>, Option<String>, Option<String>) {
        match self.active() {
            Some(active) => (
                self.seal(id, parts.0, payload).unwrap_or_default(),
                headers
                    .filter(|text| !text.is_empty())
                    .and_then(|text| self.seal_text(id, parts.1, text)),
                Some(active.to_owned()),
            ),
            None => (payload.to_vec(), headers.map(str::to_owned), None),
        }
    }
}

/// A new key: 32 random bytes in standard base64, for a key file or
/// variable (`tickler keys generate`).
pub fn generate() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn id_check(id: &str) -> Result<(), KeyError> {
    let ok = !id.is_empty()
        && id.len() <= KEY_ID_MAX
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(KeyError::BadId(id.to_owned()))
    }
}

/// The 32 bytes of key `id` from `source`.
fn key_read(id: &str, source: &str) -> Result<[u8; 32], KeyError> {
    let failed = |why: String| KeyError::Source {
        id: id.to_owned(),
        why,
    };
    let raw: Vec<u8> = if let Some(path) = source.strip_prefix("file:") {
        std::fs::read(path).map_err(|err| failed(format!("cannot read {path}: {err}")))?
    } else if let Some(var) = source.strip_prefix("env:") {
        std::env::var(var)
            .map_err(|_| failed(format!("the variable {var} is not set")))?
            .into_bytes()
    } else {
        return Err(failed(
            "its source must be file:PATH or env:VARIABLE (never the key itself)".to_owned(),
        ));
    };
    if raw.len() == 32 {
        return Ok(raw.try_into().expect("32 bytes"));
    }
    let text = String::from_utf8(raw)
        .map_err(|_| failed("neither 32 bytes nor base64 of 32 bytes".to_owned()))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|_| failed("neither 32 bytes nor base64 of 32 bytes".to_owned()))?;
    decoded
        .try_into()
        .map_err(|_| failed("base64 of other than 32 bytes".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(active: &str) -> Keyring {
        Keyring::from_keys(
            Some(active),
            [("k1".to_owned(), [1u8; 32]), ("k2".to_owned(), [2u8; 32])],
        )
        .unwrap()
    }

    #[test]
    fn a_sealed_value_opens_for_its_row_and_part_only() {
        let keys = ring("k1");
        let sealed = keys.seal(7, Part::Payload, b"{\"user\":42}").unwrap();
        assert_eq!(sealed.len(), 11 + OVERHEAD);
        assert!(!sealed.windows(4).any(|w| w == b"user"), "no plain text");
        assert_eq!(
            keys.open("k1", 7, Part::Payload, &sealed).unwrap(),
            b"{\"user\":42}"
        );
        // Another row, the other column, another key, a changed byte: no.
        assert_eq!(
            keys.open("k1", 8, Part::Payload, &sealed),
            Err(KeyError::Tampered("k1".into()))
        );
        assert!(keys.open("k1", 7, Part::Headers, &sealed).is_err());
        assert!(keys.open("k1", 7, Part::SchedulePayload, &sealed).is_err());
        assert!(keys.open("k2", 7, Part::Payload, &sealed).is_err());
        let mut changed = sealed.clone();
        changed[20] ^= 1;
        assert!(keys.open("k1", 7, Part::Payload, &changed).is_err());
        assert_eq!(
            keys.open("k9", 7, Part::Payload, &sealed),
            Err(KeyError::Missing("k9".into()))
        );
        // Two seals of one value differ (a fresh nonce each).
        assert_ne!(
            sealed,
            keys.seal(7, Part::Payload, b"{\"user\":42}").unwrap()
        );
        let text = keys.seal_text(7, Part::Headers, "{\"a\":\"b\"}").unwrap();
        assert_eq!(
            keys.open_text("k1", 7, Part::Headers, &text).unwrap(),
            "{\"a\":\"b\"}"
        );
    }

    #[test]
    fn without_an_active_key_nothing_is_sealed_and_keys_never_show() {
        let none = Keyring::none();
        assert_eq!(none.seal(1, Part::Payload, b"x"), None);
        let readable = Keyring::from_keys(None, [("old".to_owned(), [3u8; 32])]).unwrap();
        assert_eq!(readable.seal(1, Part::Payload, b"x"), None);
        assert!(readable.has("old"));
        let shown = format!("{:?}", ring("k2"));
        assert_eq!(
            shown,
            r#"Keyring { active: Some("k2"), keys: ["k1", "k2"] }"#
        );
        assert!(matches!(
            Keyring::from_keys(Some("k3"), [("k1".to_owned(), [1u8; 32])]),
            Err(KeyError::ActiveUnknown(_))
        ));
        assert!(matches!(
            Keyring::from_keys(None, [("a b".to_owned(), [1u8; 32])]),
            Err(KeyError::BadId(_))
        ));
    }

    #[test]
    fn keys_are_read_from_files_and_variables_as_bytes_or_base64() {
        let dir = std::env::temp_dir().join(format!("tickler-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("raw"), [5u8; 32]).unwrap();
        std::fs::write(dir.join("b64"), generate() + "\n").unwrap();
        std::fs::write(dir.join("short"), "c2hvcnQ=").unwrap();
        let source = |name: &str| format!("file:{}", dir.join(name).display());
        assert_eq!(key_read("a", &source("raw")).unwrap(), [5u8; 32]);
        assert!(key_read("a", &source("b64")).is_ok());
        let err = key_read("a", &source("short")).unwrap_err().to_string();
        assert!(
            err.contains("other than 32 bytes") && !err.contains("c2hv"),
            "{err}"
        );
        let err = key_read("a", "c2hvcnQ=").unwrap_err().to_string();
        assert!(
            err.contains("file:PATH or env:VARIABLE") && !err.contains("c2hv"),
            "{err}"
        );
        assert!(key_read("a", "env:TICKLER_TEST_NO_SUCH_KEY").is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
