//! How jobs' payloads are kept at rest: `[encryption]` and
//! `[compression]`. Each section with its defaults and its own checks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

/// `[encryption]`: jobs' payloads and headers encrypted at rest
/// (docs/security.md#encryption-at-rest).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EncryptionSettings {
    /// The key new rows are sealed under; unset: encryption is off (rows
    /// sealed before still open with their key, if it is in `keys`).
    pub active_key: Option<String>,
    /// Every key a row may be sealed under, by id: where to read it,
    /// `file:PATH` or `env:VARIABLE` (32 bytes, or their base64). The key
    /// itself is never a setting.
    pub keys: BTreeMap<String, String>,
}

impl EncryptionSettings {
    /// The section's own checks: none here. The keys are read where they
    /// are named (`file:PATH`, `env:VARIABLE`) and checked by
    /// `Keyring::load` at start-up, which the configuration cannot do
    /// without reading them. A rule for a new setting goes here.
    pub fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
}

/// `[compression]`: jobs' payloads compressed at rest
/// (docs/operations.md#payload-compression).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionSettings {
    /// `zstd`: new payloads are stored compressed when that is smaller,
    /// with the newest dictionary (`tickler compression train`) once it is
    /// ripe; `off`: as given. Compressed rows are read either way.
    pub payloads: PayloadCompression,
    /// zstd's level, 1 (fastest) to 19.
    pub level: i32,
    /// How long after an instance learns of a new dictionary it writes
    /// with it: long enough for every other instance to have loaded it.
    pub dict_delay_ms: u64,
}

impl Default for CompressionSettings {
    fn default() -> Self {
        CompressionSettings {
            payloads: PayloadCompression::Off,
            level: 3,
            dict_delay_ms: 20_000,
        }
    }
}

impl CompressionSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=19).contains(&self.level) {
            return Err(invalid("compression.level", "must be between 1 and 19"));
        }
        if self.dict_delay_ms > 3_600_000 {
            return Err(invalid(
                "compression.dict_delay_ms",
                "must be at most 3600000",
            ));
        }
        Ok(())
    }
}

impl CompressionSettings {
    /// The payload codec these settings describe.
    pub fn codec(&self) -> crate::domain::compression::Codec {
        crate::domain::compression::Codec::new(
            self.payloads == PayloadCompression::Zstd,
            self.level,
            std::time::Duration::from_millis(self.dict_delay_ms),
        )
    }
}

/// The `compression.payloads` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadCompression {
    Off,
    Zstd,
}
