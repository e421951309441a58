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
//! The row says whether its payload is compressed in `payload_kind`
//! (`json+zstd`, `bytes+zstd`: an instant change of the column's ENUM,
//! where a new column would rebuild the table on MariaDB, its writes
//! blocked, see docs/upgrades.md); a compressed payload is the dictionary's
//! id (2 bytes, big-endian, 0 for none) and a zstd frame. So old rows,
//! rows written with compression off and rows edited by hand
//! (`payload_kind = 'json'`) are read as they are. A payload is stored
//! compressed only when that is smaller.
//!
//! Dictionaries never change and are never deleted while a row may use
//! them. Every instance loads new ones every few seconds; a new dictionary
//! is used for writing only [`RIPE_AFTER`] after this instance learnt of
//! it, so the others have it too by the time rows need it. A row whose
//! dictionary an instance does not know is [`CodecError::Unknown`]: the
//! store loads `payload_dicts` afresh and reads the row again, and one
//! still unknown then is a broken row (no instance writes with a
//! dictionary before it is in the table), never a wait without end.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use zstd::zstd_safe::CParameter;

/// How long after an instance learns of a new dictionary it starts
/// writing with it, by default (`compression.dict_delay_ms`): several
/// refreshes of every other instance.
pub const RIPE_AFTER: Duration = Duration::from_secs(20);

/// Payloads shorter than this are stored as given: a frame's header
/// would eat what little zstd saves on them.
pub const MIN_BYTES: usize = 32;

/// Most bytes of a trained dictionary.
pub const DICT_MAX_BYTES: usize = 16 * 1024;

/// Most bytes a stored frame may expand to: the largest payload limit
/// any configuration takes (`jobs.payload_max_bytes` is below 16 MiB).
/// A frame whose header claims more (a row edited by hand, a restored
/// one) is refused before anything is allocated for it: the header is
/// the row's word, and a row is hostile input.
pub const EXPAND_MAX_BYTES: usize = 16 * 1024 * 1024;

/// The dictionary id of plain zstd (no dictionary).
const NO_DICT: u16 = 0;

/// Bytes before the zstd frame of a compressed payload: the dictionary's
/// id, big-endian (0: none).
const HEADER: usize = 2;

/// The first schema whose binaries read compressed payloads (V50 added
/// their kinds): an instance built for an older one (`instances.version`,
/// `+schema.N`) cannot read them, so compression is held while one is
/// live.
pub const SCHEMA: i32 = 50;

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
    /// New payloads written as given while on: an instance that cannot
    /// read compressed ones is live (see [`SCHEMA`]).
    held: AtomicBool,
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
            held: AtomicBool::new(false),
            dicts: RwLock::default(),
        }))
    }

    /// Compressing new payloads or not (`on`), at zstd's `level`, with a
    /// new dictionary once it is `ripe_after` old (`[compression]`: see
    /// `CompressionSettings::codec`).
    pub fn new(on: bool, level: i32, ripe_after: Duration) -> Codec {
        Codec(Arc::new(Inner {
            on,
            level,
            ripe_after: Some(ripe_after),
            held: AtomicBool::new(false),
            dicts: RwLock::default(),
        }))
    }

    fn ripe_after(&self) -> Duration {
        self.0.ripe_after.unwrap_or(RIPE_AFTER)
    }

    pub fn is_on(&self) -> bool {
        self.0.on
    }

    /// Holds compression (`true`: new payloads are written as given, and
    /// compressed ones are still read) or lets it go on; returns whether
    /// it was held.
    pub fn hold(&self, held: bool) -> bool {
        self.0.held.swap(held, Ordering::Relaxed)
    }

    pub fn is_held(&self) -> bool {
        self.0.held.load(Ordering::Relaxed)
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

    /// `payload` as it is to be stored, and whether that is compressed: as
    /// given when compression is off, when it is short, or when zstd does
    /// not make it smaller.
    pub fn pack(&self, payload: &[u8]) -> (Vec<u8>, bool) {
        if !self.0.on || self.is_held() || payload.len() < MIN_BYTES {
            return (payload.to_vec(), false);
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
            let mut packed = Vec::with_capacity(HEADER + payload.len());
            packed.extend_from_slice(&id.to_be_bytes());
            packed.extend_from_slice(&compressor.compress(payload).ok()?);
            Some(packed)
        });
        match packed {
            Some(packed) if packed.len() < payload.len() => (packed, true),
            _ => (payload.to_vec(), false),
        }
    }

    /// The payload a row stored as `stored`, compressed or not (its
    /// `payload_kind` says: `json+zstd`, `bytes+zstd`).
    pub fn unpack(&self, stored: Vec<u8>, compressed: bool) -> Result<Vec<u8>, CodecError> {
        if !compressed || stored.is_empty() {
            // As given; or a listing's row, read without its payload.
            return Ok(stored);
        }
        let (id, frame) = match stored.split_first_chunk::<HEADER>() {
            Some((id, frame)) => (u16::from_be_bytes(*id), frame),
            None => return Err(CodecError::Broken("shorter than its header".into())),
        };
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
        let size = zstd::zstd_safe::get_frame_content_size(frame)
            .ok()
            .flatten()
            .ok_or_else(|| CodecError::Broken("no zstd frame with its size".into()))?;
        let size = usize::try_from(size)
            .ok()
            .filter(|size| *size <= EXPAND_MAX_BYTES)
            .ok_or_else(|| {
                CodecError::Broken(format!(
                    "its frame claims {size} bytes, past the {EXPAND_MAX_BYTES} any payload may have"
                ))
            })?;
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
                .decompress(frame, size)
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
        let (packed, compressed) = on.pack(&payload(1));
        assert!(compressed);
        assert_eq!(packed[..HEADER], [0, 0], "no dictionary");
        assert!(packed.len() < payload(1).len());
        let off = Codec::off();
        assert_eq!(off.pack(&payload(1)), (payload(1), false));
        assert_eq!(off.unpack(packed, true).unwrap(), payload(1));
    }

    #[test]
    fn held_stores_as_given_and_still_reads_compressed_rows() {
        let codec = Codec::zstd(3);
        let (packed, _) = codec.pack(&payload(2));
        assert!(!codec.hold(true));
        assert_eq!(codec.pack(&payload(2)), (payload(2), false));
        assert_eq!(codec.unpack(packed, true).unwrap(), payload(2));
        assert!(codec.hold(false));
        assert!(codec.pack(&payload(2)).1, "compressing again");
    }

    #[test]
    fn short_and_incompressible_payloads_stay_as_given() {
        let codec = Codec::zstd(3);
        assert_eq!(codec.pack(b"{\"a\":1}"), (b"{\"a\":1}".to_vec(), false));
        let noise: Vec<u8> = (0..200u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(codec.pack(&noise), (noise.clone(), false));
        assert_eq!(codec.unpack(noise.clone(), false).unwrap(), noise);
    }

    #[test]
    fn a_trained_dictionary_shrinks_small_payloads_and_is_needed_to_read_them() {
        let samples: Vec<Vec<u8>> = (0..2_000).map(payload).collect();
        let dict = train(&samples).unwrap();
        let writer = Codec::zstd(3);
        let plain_size = writer.pack(&payload(5_000)).0.len();
        writer.learn_ripe(7, dict.clone());
        let (packed, compressed) = writer.pack(&payload(5_000));
        assert!(compressed);
        assert_eq!(packed[..HEADER], [0, 7], "dictionary 7");
        assert!(
            packed.len() * 2 < plain_size,
            "{} vs {plain_size}",
            packed.len()
        );

        let reader = Codec::off();
        assert_eq!(
            reader.unpack(packed.clone(), true),
            Err(CodecError::Unknown(7))
        );
        reader.learn(vec![(7, dict)], Some((7, Duration::ZERO)));
        assert_eq!(reader.unpack(packed, true).unwrap(), payload(5_000));
    }

    #[test]
    fn a_new_dictionary_is_written_with_only_once_ripe() {
        let samples: Vec<Vec<u8>> = (0..2_000).map(payload).collect();
        let codec = Codec::zstd(3);
        let dict = train(&samples).unwrap();
        codec.learn(vec![(3, dict.clone())], Some((3, Duration::from_secs(1))));
        assert_eq!(codec.pack(&payload(9)).0[..HEADER], [0, 0]);
        // Made long enough ago (a process started since): ripe at once.
        let late = Codec::zstd(3);
        late.learn(vec![(3, dict)], Some((3, RIPE_AFTER)));
        assert_eq!(late.pack(&payload(9)).0[..HEADER], [0, 3]);
    }

    #[test]
    fn a_frame_claiming_more_than_any_payload_is_refused_before_allocating() {
        // 18 bytes: the dictionary id, then a zstd frame header whose
        // content size field says 2^63 bytes, and one empty raw block.
        let mut bomb = vec![0u8, 0];
        bomb.extend_from_slice(&[0x28, 0xB5, 0x2F, 0xFD]); // magic
        bomb.push(0xE0); // 8-byte content size, single segment
        bomb.extend_from_slice(&(1u64 << 63).to_le_bytes());
        bomb.extend_from_slice(&[0x01, 0x00, 0x00]); // last raw block, 0 bytes
        assert_eq!(bomb.len(), 18);
        for codec in [Codec::off(), Codec::zstd(3)] {
            let err = codec.unpack(bomb.clone(), true).unwrap_err();
            assert!(
                matches!(&err, CodecError::Broken(why) if why.contains("past the")),
                "{err:?}"
            );
        }
        // Just past the ceiling is refused; a real payload at it is not.
        let big = vec![b'a'; EXPAND_MAX_BYTES + 1];
        let (packed, compressed) = Codec::zstd(1).pack(&big);
        assert!(compressed);
        assert!(Codec::off().unpack(packed, true).is_err());
        let at = vec![b'a'; EXPAND_MAX_BYTES];
        let (packed, _) = Codec::zstd(1).pack(&at);
        assert_eq!(
            Codec::off().unpack(packed, true).unwrap().len(),
            EXPAND_MAX_BYTES
        );
    }

    #[test]
    fn a_changed_compressed_payload_is_an_error_not_a_panic() {
        let codec = Codec::zstd(3);
        let (mut packed, compressed) = codec.pack(&payload(2));
        let last = packed.len() - 1;
        packed[last] ^= 0xFF;
        packed.truncate(last - 3);
        assert!(matches!(
            codec.unpack(packed, compressed),
            Err(CodecError::Broken(_))
        ));
        for broken in [&b"\0\0not zstd"[..], b"\0"] {
            assert!(matches!(
                codec.unpack(broken.to_vec(), true),
                Err(CodecError::Broken(_))
            ));
        }
    }
}
