//! Failover: which pooled connections may point at a demoted primary. A
//! server's "not the primary" answer ([`super::error`] notes it as it
//! classifies the error) marks every connection opened before it; the
//! pool's hooks ([`super::pool`]) close those rather than reuse them. The
//! state is one process-wide instant; nothing here touches a database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// When a server last answered "not the primary", as nanoseconds after
/// [`demotions_epoch`]; 0 when never. Process-wide rather than per pool:
/// every pool of a process points at the same database address, and a
/// connection opened before a switchover may still be held by the old
/// primary (a TCP proxy keeps established sessions on the server it chose).
static DEMOTED_AT_NS: AtomicU64 = AtomicU64::new(0);

fn demotions_epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Marks every connection opened until now as pointing at a server that
/// takes no writes: the pools close them rather than reuse them.
pub(super) fn connections_demote() {
    let since = demotions_epoch().elapsed().as_nanos();
    DEMOTED_AT_NS.fetch_max(
        u64::try_from(since).unwrap_or(u64::MAX).max(1),
        Ordering::Relaxed,
    );
}

/// Whether a connection of `age` was opened before the last "not the
/// primary" answer: then it is closed, and the pool opens a new one to
/// whatever the address names now.
pub(super) fn connection_demoted(age: Duration) -> bool {
    let demoted_ns = DEMOTED_AT_NS.load(Ordering::Relaxed);
    if demoted_ns == 0 {
        return false;
    }
    let demoted_at = demotions_epoch() + Duration::from_nanos(demoted_ns);
    // Opened at now - age: before the demotion if that is earlier.
    Instant::now()
        .checked_sub(age)
        .is_none_or(|opened_at| opened_at <= demoted_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_opened_before_a_not_the_primary_answer_are_not_reused() {
        // Opened an hour ago: before any demotion this process can note.
        let old = Duration::from_secs(3_600);
        connections_demote();
        assert!(connection_demoted(old));
        // Opened after it: kept.
        std::thread::sleep(Duration::from_millis(5));
        assert!(!connection_demoted(Duration::from_millis(1)));
    }
}
