//! Proof of delivery (#59): where a produced record should be, and which
//! records the dispatcher reads back to prove they are there
//! (`dispatcher.verify`: `all`, `off`, or a sample rate).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::job::JobId;

/// A record the broker acknowledged: where it should be, and whose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced {
    pub id: JobId,
    pub attempt: u32,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub dispatched_at: DateTime<Utc>,
}

/// Which produced records are read back.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Verify {
    /// Every one.
    #[default]
    All,
    /// None: a job is `dispatched` when the broker acknowledged it.
    Off,
    /// This share of jobs (0 < rate < 1), chosen by job id, so that every
    /// instance and every pass picks the same ones.
    Sample(f64),
}

impl Verify {
    /// Whether job `id`'s records are read back.
    pub fn covers(&self, id: JobId) -> bool {
        match *self {
            Verify::All => true,
            Verify::Off => false,
            // A multiplicative hash spreads consecutive ids evenly.
            Verify::Sample(rate) => {
                let spread = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
                (spread as f64) < rate * (1u64 << 53) as f64
            }
        }
    }

    pub fn is_off(&self) -> bool {
        *self == Verify::Off
    }

    /// Reads `all`, `off`, or a rate: a number between 0 and 1 (0 is
    /// `off`, 1 is `all`), or a percentage such as `10%`.
    pub fn parse(text: &str) -> Result<Verify, String> {
        let text = text.trim();
        match text.to_ascii_lowercase().as_str() {
            "all" => return Ok(Verify::All),
            "off" => return Ok(Verify::Off),
            _ => {}
        }
        let (number, scale) = match text.strip_suffix('%') {
            Some(number) => (number.trim(), 100.0),
            None => (text, 1.0),
        };
        let rate = number
            .parse::<f64>()
            .ok()
            .map(|n| n / scale)
            .filter(|rate| rate.is_finite() && (0.0..=1.0).contains(rate))
            .ok_or_else(|| {
                format!("{text:?} is not `all`, `off`, or a rate between 0 and 1 (or 0% and 100%)")
            })?;
        Ok(Verify::of_rate(rate))
    }

    fn of_rate(rate: f64) -> Verify {
        if rate <= 0.0 {
            Verify::Off
        } else if rate >= 1.0 {
            Verify::All
        } else {
            Verify::Sample(rate)
        }
    }
}

impl fmt::Display for Verify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verify::All => f.write_str("all"),
            Verify::Off => f.write_str("off"),
            Verify::Sample(rate) => write!(f, "{rate}"),
        }
    }
}

impl Serialize for Verify {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Verify::Sample(rate) => serializer.serialize_f64(*rate),
            other => serializer.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Verify {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(f64),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Text(text) => Verify::parse(&text).map_err(serde::de::Error::custom),
            Raw::Number(rate) => Verify::parse(&rate.to_string()).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_reads_words_rates_and_percentages() {
        assert_eq!(Verify::parse("all"), Ok(Verify::All));
        assert_eq!(Verify::parse(" OFF "), Ok(Verify::Off));
        assert_eq!(Verify::parse("0.25"), Ok(Verify::Sample(0.25)));
        assert_eq!(Verify::parse("10%"), Ok(Verify::Sample(0.1)));
        assert_eq!(Verify::parse("0"), Ok(Verify::Off));
        assert_eq!(Verify::parse("1"), Ok(Verify::All));
        for bad in ["", "some", "1.5", "-0.1", "NaN", "200%"] {
            let err = Verify::parse(bad).unwrap_err();
            assert!(err.contains("not `all`"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_sample_covers_its_share_of_ids_and_always_the_same_ones() {
        let sample = Verify::Sample(0.1);
        let covered = (1..=100_000u64).filter(|id| sample.covers(*id)).count();
        assert!((9_000..=11_000).contains(&covered), "{covered}");
        assert!((1..=1_000u64).all(|id| sample.covers(id) == sample.covers(id)));
        assert!((1..=1_000u64).all(|id| Verify::All.covers(id)));
        assert!(!(1..=1_000u64).any(|id| Verify::Off.covers(id)));
    }

    #[test]
    fn the_setting_reads_back_what_it_writes() {
        for verify in [Verify::All, Verify::Off, Verify::Sample(0.5)] {
            let json = serde_json::to_string(&verify).unwrap();
            assert_eq!(serde_json::from_str::<Verify>(&json).unwrap(), verify);
        }
    }
}
