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
//! A payload sealed beside headers binds their presence too (its
//! associated data ends `:with-headers`), so a row whose headers are set
//! NULL by hand does not open; rows sealed before that (and while an
//! instance built before it is live, see [`HEADERS_BOUND_SCHEMA`]) are
//! read as they were written.
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

/// The first schema whose binaries open a payload sealed with its
/// headers' presence bound (V55): while an instance built for an older one
/// is live, payloads are sealed without it.
pub const HEADERS_BOUND_SCHEMA: i32 = 55;

/// Most characters of a key id (`jobs.enc_key` is `VARCHAR(64)`).
pub const KEY_ID_MAX: usize = 64;

/// The keys this process knows, and the one new rows are sealed under.
/// Cheap to clone.
///
/// The active key is held back — new rows sealed under another key — while
/// a live instance lacks it (see `crate::roles::codec_upkeep`): a fleet halfway
/// through adding a key never seals a row some of its instances cannot
/// open. A write takes [`Keyring::sealing`] once and seals with that, so
/// a row's `enc_key` always names the key its values are sealed under.
#[derive(Clone, Default)]
pub struct Keyring(Arc<Inner>);

#[derive(Default)]
struct Inner {
    active: Option<String>,
    keys: Arc<HashMap<String, Aes256Gcm>>,
    /// Shared by a ring and its [`Keyring::sealing`] snapshots.
    held: Arc<std::sync::RwLock<Hold>>,
    /// Shared too: payloads are sealed without their headers' presence
    /// bound (an instance built before that is live).
    unbound: Arc<std::sync::atomic::AtomicBool>,
    /// In a snapshot: `unbound` as it was when taken.
    unbound_then: Option<bool>,
}

/// What new rows are sealed under instead of the active key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Hold {
    /// The active key.
    #[default]
    No,
    /// Another key every live instance has.
    To(String),
    /// Written plain: a live instance opens no sealed row at all (built
    /// before encryption at rest).
    Plain,
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
    /// A key's canary (`enc_key_canaries`), by the key id's hash.
    Canary,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Payload => "jobs:{id}:payload",
            Part::Headers => "jobs:{id}:headers",
            Part::SchedulePayload => "schedules:{id}:payload",
            Part::ScheduleHeaders => "schedules:{id}:headers",
            Part::Canary => "enc_key_canaries:{id}",
        }
    }
}

/// The associated data of row `id`'s `part`: the table, the row's identity
/// and the column.
fn aad(id: u64, part: Part) -> Vec<u8> {
    format!("tickler:{}", part.name().replace("{id}", &id.to_string())).into_bytes()
}

/// As [`aad`], for a payload sealed beside headers it binds.
fn aad_with_headers(id: u64, part: Part) -> Vec<u8> {
    let mut aad = aad(id, part);
    aad.extend_from_slice(b":with-headers");
    aad
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
            keys: Arc::new(ring),
            held: Arc::default(),
            unbound: Arc::default(),
            unbound_then: None,
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

    /// The key new rows are sealed under (None: encryption is off): the
    /// configured one, or in a [`Keyring::sealing`] snapshot the one it
    /// seals with.
    pub fn active(&self) -> Option<&str> {
        self.0.active.as_deref()
    }

    /// This ring as new rows are to be sealed now: its active key unless
    /// that is held ([`Keyring::hold`]). Taken once per write.
    pub fn sealing(&self) -> Keyring {
        // Not held (the usual case, on every write): the ring itself, no
        // allocation; its active key is fixed, and whether headers are
        // bound is read once per row sealed.
        let active = match self.held() {
            _ if self.0.active.is_none() => return self.clone(),
            Hold::To(key) if self.has(&key) => Some(key),
            Hold::No | Hold::To(_) => return self.clone(),
            Hold::Plain => None,
        };
        Keyring(Arc::new(Inner {
            active,
            keys: Arc::clone(&self.0.keys),
            held: Arc::clone(&self.0.held),
            unbound: Arc::clone(&self.0.unbound),
            unbound_then: Some(self.unbound()),
        }))
    }

    /// Seals payloads without binding their headers' presence (`true`:
    /// an instance built before [`HEADERS_BOUND_SCHEMA`] is live), or with.
    pub fn unbind_headers(&self, unbound: bool) {
        self.0
            .unbound
            .store(unbound, std::sync::atomic::Ordering::Relaxed);
    }

    fn unbound(&self) -> bool {
        self.0
            .unbound_then
            .unwrap_or_else(|| self.0.unbound.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Holds the active key back (or lets it go on with [`Hold::No`]);
    /// returns the hold it replaces.
    pub fn hold(&self, hold: Hold) -> Hold {
        let mut held = self.0.held.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *held, hold)
    }

    /// The hold in force.
    pub fn held(&self) -> Hold {
        self.0
            .held
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
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
        self.seal_with(&aad(id, part), plain)
    }

    fn seal_with(&self, aad: &[u8], plain: &[u8]) -> Option<Vec<u8>> {
        let active = self.0.active.as_ref()?;
        let cipher = &self.0.keys[active];
        let nonce_bytes: [u8; NONCE_LEN] = rand::random();
        let nonce = Nonce::from_slice(&nonce_bytes);
        let sealed = cipher
            .encrypt(nonce, Payload { msg: plain, aad })
            .expect("AES-GCM seals any value below 64 GiB");
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(&nonce_bytes);
        out.extend_from_slice(&sealed);
        Some(out)
    }

    /// Opens job `id`'s `part` sealed under `key`.
    pub fn open(&self, key: &str, id: u64, part: Part, sealed: &[u8]) -> Result<Vec<u8>, KeyError> {
        self.open_with(key, &aad(id, part), sealed)
    }

    fn open_with(&self, key: &str, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, KeyError> {
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
            .decrypt(Nonce::from_slice(nonce), Payload { msg: body, aad })
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

/// What every key's canary seals.
const CANARY: &[u8] = b"tickler: this key opens what was sealed under its id";

/// The row identity a key's canary is sealed with: its id, hashed.
fn canary_id(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Keyring {
    /// A canary for key `key` (None: this ring lacks it): what
    /// [`Keyring::canary_opens`] opens only with the same key material.
    pub fn canary_seal(&self, key: &str) -> Option<Vec<u8>> {
        let cipher = self.0.keys.get(key)?;
        let nonce_bytes: [u8; NONCE_LEN] = rand::random();
        let sealed = cipher
            .encrypt(
                Nonce::from_slice(&nonce_bytes),
                Payload {
                    msg: CANARY,
                    aad: &aad(canary_id(key), Part::Canary),
                },
            )
            .expect("AES-GCM seals any value below 64 GiB");
        let mut out = nonce_bytes.to_vec();
        out.extend_from_slice(&sealed);
        Some(out)
    }

    /// Whether this ring's key `key` opens `sealed`, a canary made under
    /// that id (by any process).
    pub fn canary_opens(&self, key: &str, sealed: &[u8]) -> bool {
        self.open(key, canary_id(key), Part::Canary, sealed)
            .is_ok_and(|plain| plain == CANARY)
    }
}

/// A job's two sealed columns, as [`Keyring::open_row`] and
/// [`Keyring::seal_row`] take them.
pub const JOB: (Part, Part) = (Part::Payload, Part::Headers);
/// A schedule's template's two sealed columns.
pub const SCHEDULE: (Part, Part) = (Part::SchedulePayload, Part::ScheduleHeaders);

impl Keyring {
    /// Row `id`'s payload and headers (its text column) as stored, opened
    /// with `key` (None: stored plain, returned as they are). A payload
    /// not read (None: a listing's row) opens as empty; a sealed payload
    /// is never empty, so an empty one under a key (blanked by hand) does
    /// not open.
    pub fn open_row(
        &self,
        key: Option<&str>,
        id: u64,
        parts: (Part, Part),
        payload: Option<Vec<u8>>,
        headers: Option<String>,
    ) -> Result<(Vec<u8>, Option<String>), KeyError> {
        let Some(key) = key else {
            return Ok((payload.unwrap_or_default(), headers));
        };
        let with_headers = headers.as_deref().is_some_and(|text| !text.is_empty());
        let payload = match payload {
            None => Vec::new(),
            // Beside headers: bound to them, or sealed before binding
            // (or while an older instance was live). Without: unbound
            // only, so headers removed by hand leave it unopened.
            Some(sealed) if with_headers => self
                .open_with(key, &aad_with_headers(id, parts.0), &sealed)
                .or_else(|_| self.open(key, id, parts.0, &sealed))?,
            Some(sealed) => self.open(key, id, parts.0, &sealed)?,
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
            Some(active) => {
                let headers = headers
                    .filter(|text| !text.is_empty())
                    .and_then(|text| self.seal_text(id, parts.1, text));
                let aad = if headers.is_some() && !self.unbound() {
                    aad_with_headers(id, parts.0)
                } else {
                    aad(id, parts.0)
                };
                (
                    self.seal_with(&aad, payload).unwrap_or_default(),
                    headers,
                    Some(active.to_owned()),
                )
            }
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
    fn a_canary_opens_only_under_the_same_key_material() {
        let keys = ring("k1");
        let canary = keys.canary_seal("k1").unwrap();
        assert!(keys.canary_opens("k1", &canary));
        assert!(!keys.canary_opens("k2", &canary), "another id");
        let impostor = Keyring::from_keys(None, [("k1".to_owned(), [9u8; 32])]).unwrap();
        assert!(
            !impostor.canary_opens("k1", &canary),
            "other bytes under the id"
        );
        assert_eq!(keys.canary_seal("k9"), None);
    }

    #[test]
    fn a_held_ring_seals_under_the_key_it_is_held_to_in_one_snapshot() {
        let keys = ring("k2");
        assert_eq!(keys.sealing().active(), Some("k2"));
        assert_eq!(keys.hold(Hold::To("k1".into())), Hold::No);
        let snapshot = keys.sealing();
        assert_eq!(snapshot.active(), Some("k1"));
        let (payload, _, key) = snapshot.seal_row(5, JOB, b"x", None);
        assert_eq!(key.as_deref(), Some("k1"));
        assert_eq!(keys.open("k1", 5, Part::Payload, &payload).unwrap(), b"x");
        // Held to a key the ring lacks: the active one (never a row
        // naming a key it was not sealed under).
        keys.hold(Hold::To("k9".into()));
        assert_eq!(keys.sealing().active(), Some("k2"));
        keys.hold(Hold::Plain);
        assert_eq!(keys.sealing().seal_row(5, JOB, b"x", None).2, None);
        // The snapshot taken before keeps its key.
        assert_eq!(snapshot.active(), Some("k1"));
        keys.hold(Hold::No);
        assert_eq!(keys.sealing().active(), Some("k2"));
    }

    #[test]
    fn a_sealed_row_with_its_payload_blanked_does_not_open() {
        let keys = ring("k1");
        let (payload, headers, key) = keys.seal_row(3, JOB, b"{}", Some("{\"a\":\"b\"}"));
        assert!(keys
            .open_row(key.as_deref(), 3, JOB, Some(payload), headers.clone())
            .is_ok());
        assert_eq!(
            keys.open_row(key.as_deref(), 3, JOB, Some(Vec::new()), headers.clone()),
            Err(KeyError::Tampered("k1".into()))
        );
        // A listing's row, read without its payload, opens its headers.
        let (payload, headers) = keys
            .open_row(key.as_deref(), 3, JOB, None, headers)
            .unwrap();
        assert!(payload.is_empty());
        assert_eq!(headers.as_deref(), Some("{\"a\":\"b\"}"));
    }

    #[test]
    fn a_sealed_row_with_its_headers_removed_does_not_open() {
        let keys = ring("k1");
        let headers = Some("{\"tenant\":\"a\"}");
        let (payload, sealed_headers, key) = keys.seal_row(4, JOB, b"{}", headers);
        let key = key.as_deref();
        assert!(keys
            .open_row(key, 4, JOB, Some(payload.clone()), sealed_headers)
            .is_ok());
        for removed in [None, Some(String::new())] {
            assert_eq!(
                keys.open_row(key, 4, JOB, Some(payload.clone()), removed),
                Err(KeyError::Tampered("k1".into()))
            );
        }
        // A row without headers opens without them.
        let (bare, none, _) = keys.seal_row(4, JOB, b"{}", None);
        assert_eq!(none, None);
        assert!(keys.open_row(key, 4, JOB, Some(bare), None).is_ok());
        // Sealed unbound (an older instance live): read either way, as
        // an older build reads it.
        keys.unbind_headers(true);
        let (old, old_headers, _) = keys.sealing().seal_row(4, JOB, b"{}", headers);
        keys.unbind_headers(false);
        assert!(keys
            .open_row(key, 4, JOB, Some(old.clone()), old_headers)
            .is_ok());
        assert_eq!(keys.open("k1", 4, Part::Payload, &old).unwrap(), b"{}");
        assert!(
            keys.open("k1", 4, Part::Payload, &payload).is_err(),
            "bound: an older build cannot open it"
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
