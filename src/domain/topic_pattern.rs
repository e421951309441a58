//! The topic-pattern language of `jobs.topics_allowed` and of tokens' topics: a
//! topic name in which `*` stands for any run of characters. Matching and
//! checking live here; its translation to SQL `LIKE` lives in the store.

/// The longest pattern: a topic name's longest (249).
pub const PATTERN_MAX: usize = 249;

/// Whether `text` matches `pattern`, where `*` stands for any run of
/// characters (none included) and everything else for itself.
pub fn matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty(); // no '*': the whole text
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Checks a pattern: a topic name's characters (letters, digits, `.`, `_`,
/// `-`) and `*`, 1 to [`PATTERN_MAX`] of them.
pub fn validate(pattern: &str) -> Result<(), String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*');
    if pattern.is_empty() || pattern.len() > PATTERN_MAX || !pattern.chars().all(legal) {
        return Err(format!(
            "topic pattern {pattern:?} must be a topic name with '*' for any run of characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_with_stars() {
        for (pattern, text, expected) in [
            ("orders.*", "orders.eu", true),
            ("orders.*", "orders.", true),
            ("orders.*", "order", false),
            ("*", "anything", true),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXcYYb", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("*-dlq", "orders-dlq", true),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(matches(pattern, text), expected, "{pattern} {text}");
        }
    }

    #[test]
    fn patterns_are_checked() {
        assert!(validate("orders.*").is_ok());
        assert!(validate("*").is_ok());
        assert!(validate("orders,x").is_err());
        assert!(validate("bad pattern").is_err());
        assert!(validate("").is_err());
        assert!(validate(&"a".repeat(PATTERN_MAX)).is_ok());
        assert!(validate(&"a".repeat(PATTERN_MAX + 1)).is_err());
    }
}
