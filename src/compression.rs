//! Payload compression at rest (`[compression]`): zstd, with a dictionary
//! trained on the deployment's own payloads (`tickler compression train`).
//! Pure logic; the store calls it where a job's payload is written and
//! read, and keeps the dictionaries in `payload_dicts`.
//!
//! A job's payload is small (a few hundred bytes of JSON), too small for
//! zstd to find much to share within it; a dictionary of what payloads
//! have in common (field names, enum values, formats) is what shrinks it
//! (221 bytes of a realistic JSON payload: 181 plain zstd, 71 with a
//! dictionary).
//!
//! The row says how its payload is stored in `payload_zstd`: NULL, as
//! given; 0, zstd without a dictionary; N, zstd with dictionary N. So old
//! rows, rows written with compression off and rows edited by hand
//! (`payload_zstd = NULL`) are read as they are. A payload is stored
//! compressed only when that is smaller.
//!
//! Dictionaries never change and are never deleted while a row may use
//! them. Every instance loads new ones every few seconds; a new dictionary
//! is used for writing only [`RIPE_AFTER`] after this instance learnt of
//! it, so the others have it too by the time rows need it. A row whose
//! dictionary an instance does not know yet is [`CodecError::Unknown`]:
//! a moment's wait, never a broken row.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use zstd::zstd_safe::CParameter;

use crate::config::{CompressionSettings, PayloadCompression};

/// How long after an instance learns of a new dictionary it starts
/// writing with it, by default (`compression.dict_delay_ms`): several
/// refreshes of every other instance.
pub const RIPE_AFTER: Duration = Duration::from_secs(20);

/// Payloads shorter than this are stored as given: a frame's header
/// would eat what little zstd saves on them.
pub const MIN_BYTES: usize = 32;

/// Most bytes of a trained dictionary.
pub const DICT_MAX_BYTES: usize = 16 * 1024;

/// The dictionary id of plain zstd (no dictionary).
const NO_DICT: u16 = 0;

/// Compresses and expands payloads; knows the dictionaries. Cheap to
/// clone (the clones share the dictionaries).
#[derive(Clone, Debug, Default)]
pub struct Codec(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    /// Compress new payloads (`compression.payloads = "zstd"`).
    on: bool,
    level: i32,
    /// [`RIPE_AFTER`] unless set (`compression.dict_delay_ms`).
    ripe_after: Option<Duration>,
    dicts: RwLock<Dicts>,
}

#[derive(Debug, Default)]
struct Dicts {
    bytes: HashMap<u16, Arc<Dict>>,
    /// The newest dictionary, and when it was made (on this process's
    /// clock).
    newest: Option<(u16, Instant)>,
}

/// A dictionary's bytes, and a fingerprint of them: the per-thread
/// contexts are kept by fingerprint, not id, since ids are per database
/// and one process may use several (tests, `tickler import` elsewhere).
#[derive(Debug)]
struct Dict {
    bytes: Vec<u8>,
    fingerprint: u64,
}

impl Dict {
    fn new(bytes: Vec<u8>) -> Arc<Dict> {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut hasher);
        // 0 is no dictionary.
        let fingerprint = hasher.finish().max(1);
        Arc::new(Dict { bytes, fingerprint })
    }
}

/// Why a stored payload could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Its dictionary is not loaded yet (or was deleted by hand).
    #[error("compressed with dictionary {0}, which this instance has not loaded (payload_dicts)")]
    Unknown(u16),
    #[error("compressed payload does not expand: {0}")]
    Broken(String),
}

thread_local! {
    /// Compressors by (dictionary, level): a context costs its allocation
    /// and the dictionary's loading, so each thread keeps its own.
    static COMPRESSORS: RefCell<HashMap<(u64, i32), zstd::bulk::Compressor<'static>>> =
        RefCell::new(HashMap::new());
    static DECOMPRESSORS: RefCell<HashMap<u64, zstd::bulk::Decompressor<'static>>> =
        RefCell::new(HashMap::new());
}

impl Codec {
    /// Compression off: payloads are written as given; compressed ones
    /// are still read (with the dictionaries loaded).
    pub fn off() -> Codec {
        Codec::default()
    }

    /// Compression on at zstd `level` (1–19).
    pub fn zstd(level: i32) -> Codec {
        Codec(Arc::new(Inner {
            on: true,
            level,
            ripe_after: None,
            dicts: RwLock::default(),
        }))
    }

    /// As `[compression]` says.
    pub fn from_settings(settings: &CompressionSettings) -> Codec {
        Codec(Arc::new(Inner {
            on: settings.payloads == PayloadCompression::Zstd,
            level: settings.level,
            ripe_after: Some(Duration::from_millis(settings.dict_delay_ms)),
            dicts: RwLock::default(),
        }))
    }

    fn ripe_after(&self) -> Duration {
        self.0.ripe_after.unwrap_or(RIPE_AFTER)
    }

    pub fn is_on(&self) -> bool {
        self.0.on
    }

    /// Whether payloads of `payload_zstd` = `dict` can be expanded here.
    pub fn knows(&self, dict: u16) -> bool {
        dict == NO_DICT || {
            let dicts = self.0.dicts.read().unwrap_or_else(|e| e.into_inner());
            dicts.bytes.contains_key(&dict)
        }
    }

    /// The ids of the dictionaries loaded.
    pub fn dict_ids(&self) -> Vec<u16> {
        let dicts = self.0.dicts.read().unwrap_or_else(|e| e.into_inner());
        let mut ids: Vec<u16> = dicts.bytes.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Learns dictionaries read from `payload_dicts`; `newest` is the one
    /// created last (by `created_at`, not by id) and how long ago (by the
    /// database's clock), to write with once ripe: a dictionary made long
    /// ago is ripe at once for a process just started.
    pub fn learn(&self, found: Vec<(u16, Vec<u8>)>, newest: Option<(u16, Duration)>) {
        let mut dicts = self.0.dicts.write().unwrap_or_else(|e| e.into_inner());
        for (id, bytes) in found {
            dicts.bytes.entry(id).or_insert_with(|| Dict::new(bytes));
        }
        if let Some((id, age)) = newest.filter(|(id, _)| dicts.bytes.contains_key(id)) {
            if dicts.newest.map(|(known, _)| known) != Some(id) {
                let made = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
                dicts.newest = Some((id, made));
            }
        }
    }

    /// As [`Codec::learn`], the dictionary usable for writing at once (a
    /// process that checks a dictionary it just made, or a test).
    pub fn learn_ripe(&self, id: u16, bytes: Vec<u8>) {
        let mut dicts = self.0.dicts.write().unwrap_or_else(|e| e.into_inner());
        dicts.bytes.insert(id, Dict::new(bytes));
        let ripe = Instant::now()
            .checked_sub(self.ripe_after())
            .unwrap_or_else(Instant::now);
        dicts.newest = Some((id, ripe));
    }

    /// The dictionary new payloads are written with (0: none).
    fn writing_dict(&self) -> (u16, Option<Arc<Dict>>) {
        let dicts = self.0.dicts.read().unwrap_or_else(|e| e.into_inner());
        match dicts.newest {
            Some((id, learnt)) if learnt.elapsed() >= self.ripe_after() => {
                (id, dicts.bytes.get(&id).cloned())
            }
            _ => (NO_DICT, None),
        }
    }

    /// `payload` as it is to be stored, and the row's `payload_zstd`: the
    /// payload as given (None) when compression is off, when it is short,
    /// or when zstd does not make it smaller.
    pub fn pack(&self, payload: &[u8]) -> (Vec<u8>, Option<u16>) {
        if !self.0.on || payload.len() < MIN_BYTES {
            return (payload.to_vec(), None);
        }
        let (id, dict) = self.writing_dict();
        let level = self.0.level;
        let packed = COMPRESSORS.with(|cell| {
            let mut compressors = cell.borrow_mut();
            let fingerprint = dict.as_ref().map_or(0, |dict| dict.fingerprint);
            let compressor = match compressors.entry((fingerprint, level)) {
                std::collections::hash_map::Entry::Occupied(slot) => slot.into_mut(),
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(compressor(level, dict.as_ref().map(|d| &d.bytes[..])).ok()?)
                }
            };
            compressor.compress(payload).ok()
        });
        match packed {
            Some(packed) if packed.len() < payload.len() => (packed, Some(id)),
            _ => (payload.to_vec(), None),
        }
    }

    /// The payload a row stored as `stored` with `payload_zstd` = `zstd`.
    pub fn unpack(&self, stored: Vec<u8>, zstd: Option<u16>) -> Result<Vec<u8>, CodecError> {
        let Some(id) = zstd else {
            return Ok(stored);
        };
        if stored.is_empty() {
            // A listing's row, read without its payload.
            return Ok(stored);
        }
        let dict = if id == NO_DICT {
            None
        } else {
            let dicts = self.0.dicts.read().unwrap_or_else(|e| e.into_inner());
            Some(
                dicts
                    .bytes
                    .get(&id)
                    .cloned()
                    .ok_or(CodecError::Unknown(id))?,
            )
        };
        let size = zstd::zstd_safe::get_frame_content_size(&stored)
            .ok()
            .flatten()
            .ok_or_else(|| CodecError::Broken("no zstd frame with its size".into()))?;
        let size = usize::try_from(size).map_err(|_| CodecError::Broken("too large".into()))?;
        DECOMPRESSORS.with(|cell| {
            let mut decompressors = cell.borrow_mut();
            let fingerprint = dict.as_ref().map_or(0, |dict| dict.fingerprint);
            let decompressor = match decompressors.entry(fingerprint) {
                std::collections::hash_map::Entry::Occupied(slot) => slot.into_mut(),
                std::collections::hash_map::Entry::Vacant(slot) => {
                    let made = match dict.as_deref() {
                        Some(dict) => zstd::bulk::Decompressor::with_dictionary(&dict.bytes),
                        None => zstd::bulk::Decompressor::new(),
                    };
                    slot.insert(made.map_err(|err| CodecError::Broken(err.to_string()))?)
                }
            };
            decompressor
                .decompress(&stored, size)
                .map_err(|err| CodecError::Broken(err.to_string()))
        })
    }
}

/// A compression context: no checksum (InnoDB checks its pages) and no
/// dictionary id in the frame (the row names it), 4 bytes each saved.
fn compressor(level: i32, dict: Option<&[u8]>) -> std::io::Result<zstd::bulk::Compressor<'static>> {
    let mut compressor = match dict {
        Some(bytes) => zstd::bulk::Compressor::with_dictionary(level, bytes)?,
        None => zstd::bulk::Compressor::new(level)?,
    };
    compressor.set_parameter(CParameter::ChecksumFlag(false))?;
    compressor.set_parameter(CParameter::DictIdFlag(false))?;
    compressor.set_parameter(CParameter::ContentSizeFlag(true))?;
    Ok(compressor)
}

/// A dictionary trained on `samples` (payloads as given), at most
/// [`DICT_MAX_BYTES`]. zstd needs a few hundred samples at least.
pub fn train(samples: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    zstd::dict::from_samples(samples, DICT_MAX_BYTES).map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(i: u32) -> Vec<u8> {
        let words = [
            "reminder", "invoice", "renewal", "trial", "payment", "survey",
        ];
        format!(
            r#"{{"user_id":{},"order_id":"{:08x}-4a1b-9c2d-{:012x}","template":"{}_v{}","locale":"en-GB","channel":"email","amount":{}.{:02},"currency":"EUR","note":"{} {} {}"}}"#,
            i.wrapping_mul(2_654_435_761),
            i.wrapping_mul(40_503),
            u64::from(i) * 7_919,
            words[i as usize % 6],
            i % 5,
            i % 500,
            i % 100,
            words[(i / 6) as usize % 6],
            words[(i / 36) as usize % 6],
            words[(i / 7) as usize % 6],
        )
        .into_bytes()
    }

    #[test]
    fn off_stores_as_given_and_reads_compressed_rows_anyway() {
        let on = Codec::zstd(3);
        let (packed, zstd) = on.pack(&payload(1));
        assert_eq!(zstd, Some(0));
        assert!(packed.len() < payload(1).len());
        let off = Codec::off();
        assert_eq!(off.pack(&payload(1)), (payload(1), None));
        assert_eq!(off.unpack(packed, zstd).unwrap(), payload(1));
    }

    #[test]
    fn short_and_incompressible_payloads_stay_as_given() {
        let codec = Codec::zstd(3);
        assert_eq!(codec.pack(b"{\"a\":1}"), (b"{\"a\":1}".to_vec(), None));
        let noise: Vec<u8> = (0..200u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(codec.pack(&noise), (noise.clone(), None));
        assert_eq!(codec.unpack(noise.clone(), None).unwrap(), noise);
    }

    #[test]
    fn a_trained_dictionary_shrinks_small_payloads_and_is_needed_to_read_them() {
        let samples: Vec<Vec<u8>> = (0..2_000).map(payload).collect();
        let dict = train(&samples).unwrap();
        let writer = Codec::zstd(3);
        let plain_size = writer.pack(&payload(5_000)).0.len();
        writer.learn_ripe(7, dict.clone());
        let (packed, zstd) = writer.pack(&payload(5_000));
        assert_eq!(zstd, Some(7));
        assert!(
            packed.len() * 2 < plain_size,
            "{} vs {plain_size}",
            packed.len()
        );

        let reader = Codec::off();
        assert_eq!(
            reader.unpack(packed.clone(), zstd),
            Err(CodecError::Unknown(7))
        );
        reader.learn(vec![(7, dict)], Some((7, Duration::ZERO)));
        assert_eq!(reader.unpack(packed, zstd).unwrap(), payload(5_000));
    }

    #[test]
    fn a_new_dictionary_is_written_with_only_once_ripe() {
        let samples: Vec<Vec<u8>> = (0..2_000).map(payload).collect();
        let codec = Codec::zstd(3);
        let dict = train(&samples).unwrap();
        codec.learn(vec![(3, dict.clone())], Some((3, Duration::from_secs(1))));
        assert_eq!(codec.pack(&payload(9)).1, Some(0));
        // Made long enough ago (a process started since): ripe at once.
        let late = Codec::zstd(3);
        late.learn(vec![(3, dict)], Some((3, RIPE_AFTER)));
        assert_eq!(late.pack(&payload(9)).1, Some(3));
    }

    #[test]
    fn a_changed_compressed_payload_is_an_error_not_a_panic() {
        let codec = Codec::zstd(3);
        let (mut packed, zstd) = codec.pack(&payload(2));
        let last = packed.len() - 1;
        packed[last] ^= 0xFF;
        packed.truncate(last - 3);
        assert!(matches!(
            codec.unpack(packed, zstd),
            Err(CodecError::Broken(_))
        ));
        assert!(matches!(
            codec.unpack(b"not zstd".to_vec(), Some(0)),
            Err(CodecError::Broken(_))
        ));
    }
}
