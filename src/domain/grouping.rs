//! Fair dispatch by tenant: what a topic's jobs are grouped by (a key
//! prefix, a header's value, or the API token that created the job), so
//! that each group gets its own pace and a burst of one never delays the
//! others. A key or a header is the creator's choice, so one tenant can
//! put its jobs in another's group; the token cannot be chosen (#57). Pure: the dispatcher applies it
//! (`dispatcher/claim.rs`), the API and the configuration parse it.

use std::collections::BTreeMap;
use std::fmt;

/// The group of a job whose key lacks the separator, or that lacks the
/// header: one group of its own.
pub const UNGROUPED: &str = "";

/// Longest group name kept as is; longer ones (a header's value may be
/// long) are shortened with a hash so their pace key stays small.
const GROUP_NAME_MAX: usize = 100;

/// What a topic's jobs are grouped by: `key:SEP` (the key up to the first
/// `SEP`, e.g. `key::` makes `acme:order-1` group `acme`), `header:NAME`
/// (that header's value, e.g. `header:tenant`) or `token` (the API token
/// that created the job: `token-ID`; jobs made without one — by the
/// ingress, an import, a schedule — are ungrouped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBy {
    KeyPrefix(String),
    Header(String),
    Token,
}

impl GroupBy {
    /// Parses `key:SEP` (a separator of 1 to 8 characters),
    /// `header:NAME` (1 to 100 of letters, digits, `-`, `_`, `.`) or
    /// `token`.
    pub fn parse(text: &str) -> Result<GroupBy, String> {
        if text == "token" {
            return Ok(GroupBy::Token);
        }
        if let Some(separator) = text.strip_prefix("key:") {
            let valid = !separator.is_empty()
                && separator.len() <= 8
                && separator.bytes().all(|b| b.is_ascii_graphic());
            if !valid {
                return Err(format!(
                    "group_by {text:?}: the key's separator is 1 to 8 printable ASCII characters (key::, key:/)"
                ));
            }
            return Ok(GroupBy::KeyPrefix(separator.to_owned()));
        }
        if let Some(name) = text.strip_prefix("header:") {
            let valid = !name.is_empty()
                && name.len() <= 100
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !valid {
                return Err(format!(
                    "group_by {text:?}: a header's name is 1 to 100 of letters, digits, '-', '_', '.'"
                ));
            }
            return Ok(GroupBy::Header(name.to_owned()));
        }
        Err(format!(
            "group_by {text:?} is none of key:SEPARATOR (key::), header:NAME (header:tenant) and token"
        ))
    }

    /// The group of a job with this key and these headers, created by
    /// the API token `token` (None: by none).
    pub fn group_of<'a>(
        &self,
        key: Option<&'a str>,
        headers: &'a BTreeMap<String, String>,
        token: Option<u64>,
    ) -> String {
        let name = match self {
            GroupBy::KeyPrefix(separator) => key
                .and_then(|key| key.split_once(separator.as_str()))
                .map_or(UNGROUPED, |(prefix, _)| prefix),
            GroupBy::Header(header) => headers.get(header).map_or(UNGROUPED, String::as_str),
            GroupBy::Token => {
                return token.map_or_else(|| UNGROUPED.to_owned(), |id| format!("token-{id}"))
            }
        };
        if name.len() <= GROUP_NAME_MAX {
            return name.to_owned();
        }
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in name.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut cut = 64;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}…{hash:016x}", &name[..cut])
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupBy::KeyPrefix(separator) => write!(f, "key:{separator}"),
            GroupBy::Header(name) => write!(f, "header:{name}"),
            GroupBy::Token => write!(f, "token"),
        }
    }
}

/// A topic's grouping in force: what by, and each group's pace (None: the
/// groups only share the topic's pace fairly).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grouping {
    pub by: GroupBy,
    pub per_second: Option<u32>,
}

/// Orders `groups`' items round-robin (one of each group in turn, groups
/// in their order): a pace that lets the first n through then serves every
/// group alike.
pub fn round_robin<T>(groups: Vec<Vec<T>>) -> Vec<T> {
    let total = groups.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut iters: Vec<std::vec::IntoIter<T>> = groups.into_iter().map(Vec::into_iter).collect();
    while out.len() < total {
        for iter in &mut iters {
            if let Some(item) = iter.next() {
                out.push(item);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_group_is_the_keys_prefix_or_the_headers_value() {
        let by_key = GroupBy::parse("key::").unwrap();
        assert_eq!(by_key, GroupBy::KeyPrefix(":".into()));
        let none = headers(&[]);
        assert_eq!(by_key.group_of(Some("acme:order-1"), &none, None), "acme");
        assert_eq!(
            by_key.group_of(Some("acme:a:b"), &none, None),
            "acme",
            "up to the first"
        );
        assert_eq!(by_key.group_of(Some("plain"), &none, None), UNGROUPED);
        assert_eq!(by_key.group_of(None, &none, None), UNGROUPED);
        let by_header = GroupBy::parse("header:tenant").unwrap();
        assert_eq!(by_header.to_string(), "header:tenant");
        assert_eq!(
            by_header.group_of(None, &headers(&[("tenant", "globex")]), None),
            "globex"
        );
        assert_eq!(by_header.group_of(Some("x:y"), &none, Some(3)), UNGROUPED);
        let long = "é".repeat(80);
        let shortened = by_header.group_of(None, &headers(&[("tenant", &long)]), None);
        assert!(
            shortened.len() < 100 && shortened.contains('…'),
            "{shortened}"
        );
        assert_ne!(
            shortened,
            by_header.group_of(None, &headers(&[("tenant", &"é".repeat(81))]), None),
            "distinct values stay distinct"
        );
    }

    #[test]
    fn a_group_by_token_is_the_creating_token_whatever_the_key_or_headers_say() {
        let by_token = GroupBy::parse("token").unwrap();
        assert_eq!(by_token.to_string(), "token");
        let forged = headers(&[("tenant", "acme")]);
        assert_eq!(
            by_token.group_of(Some("acme:x"), &forged, Some(7)),
            "token-7"
        );
        assert_eq!(
            by_token.group_of(Some("acme:x"), &forged, Some(8)),
            "token-8"
        );
        assert_eq!(by_token.group_of(Some("acme:x"), &forged, None), UNGROUPED);
    }

    #[test]
    fn bad_groupings_are_refused_with_the_forms_named() {
        for bad in [
            "",
            "key:",
            "key:123456789",
            "key: ",
            "key:é",
            "header:",
            "header:a b",
            "tenant",
            "tokens",
            "token:",
            "body:x",
        ] {
            let err = GroupBy::parse(bad).unwrap_err();
            assert!(err.contains("group_by"), "{bad}: {err}");
        }
    }

    #[test]
    fn round_robin_serves_each_group_in_turn() {
        let order = round_robin(vec![vec![1, 2, 3, 4], vec![10], vec![20, 21]]);
        assert_eq!(order, [1, 10, 20, 2, 21, 3, 4]);
        assert!(round_robin::<u8>(vec![]).is_empty());
    }
}
