//! What holds claiming back: the jobs between their claim and their
//! record, and the broker's acknowledgements by topic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Holds claiming back while it lives (see [`Pipeline::stall`]).
pub(super) struct Stall(Arc<Pipeline>);

impl Drop for Stall {
    fn drop(&mut self) {
        self.0.stalled.fetch_sub(1, Ordering::Relaxed);
        self.0.freed.notify_waiters();
    }
}

/// Counts the jobs between their claim and their record, so that claiming
/// waits while too many are in flight, or while the broker keeps records
/// unacknowledged past `ack_wait` (a slow broker or database slows claiming
/// down instead of piling claims up in the producer's queue).
#[derive(Default)]
pub struct Pipeline {
    jobs: AtomicUsize,
    /// Records waited for past `ack_wait`, by groups.
    stalled: AtomicUsize,
    freed: Notify,
}

impl Pipeline {
    pub(super) fn claimed(&self, n: usize) {
        self.jobs.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn settled(&self, n: usize) {
        let _ = self
            .jobs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |jobs| {
                Some(jobs.saturating_sub(n))
            });
        self.freed.notify_waiters();
    }

    /// A group's records are waited for past `ack_wait`: claiming waits
    /// until the returned guard is dropped.
    pub(super) fn stall(self: &Arc<Self>) -> Stall {
        self.stalled.fetch_add(1, Ordering::Relaxed);
        Stall(self.clone())
    }

    /// Returns once fewer than `max` jobs are in flight and the broker
    /// answers within `ack_wait`.
    pub(super) async fn room(&self, max: usize) {
        loop {
            let freed = self.freed.notified();
            if self.jobs.load(Ordering::Relaxed) < max && self.stalled.load(Ordering::Relaxed) == 0
            {
                return;
            }
            freed.await;
        }
    }
}

/// A topic whose records have not been acknowledged for this long, while
/// other topics' were, is one the broker stopped answering for.
pub(super) const TOPIC_SILENT_AFTER: Duration = Duration::from_secs(1);
/// Another topic counts as answered when one of its records was
/// acknowledged within this long.
pub(super) const BROKER_ANSWERING_WITHIN: Duration = Duration::from_secs(10);

/// When the broker last acknowledged a record of each topic.
#[derive(Default)]
pub(super) struct Acks {
    last: std::sync::Mutex<HashMap<String, Instant>>,
}

impl Acks {
    pub(super) fn acked(&self, topic: &str, now: Instant) {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Called for every acknowledged record: no allocation once the
        // topic is known.
        match last.get_mut(topic) {
            Some(at) => *at = now,
            None => {
                last.insert(topic.to_owned(), now);
            }
        }
    }

    /// Whether records of `topic` still unacknowledged at `now` are the
    /// topic's trouble rather than the broker's: none of its records was
    /// acknowledged for `TOPIC_SILENT_AFTER`, while another topic's was
    /// since, within `BROKER_ANSWERING_WITHIN`. With one topic, or all
    /// topics silent alike, the broker is slow for everyone.
    pub(super) fn suspect(&self, topic: &str, now: Instant) -> bool {
        let last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let own = last.get(topic).copied();
        if own.is_some_and(|at| now.saturating_duration_since(at) < TOPIC_SILENT_AFTER) {
            return false;
        }
        last.iter().any(|(other, at)| {
            other != topic
                && now.saturating_duration_since(*at) < BROKER_ANSWERING_WITHIN
                && own.is_none_or(|own| *at > own)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_topic_silent_while_others_are_answered_is_left_behind() {
        let acks = Acks::default();
        let t0 = Instant::now();
        assert!(
            !acks.suspect("orders", t0),
            "no answer from the broker yet: wait"
        );
        acks.acked("payments", t0);
        assert!(
            acks.suspect("orders", t0),
            "others answered, this one never"
        );
        acks.acked("orders", t0);
        assert!(
            !acks.suspect("orders", t0 + Duration::from_millis(500)),
            "answered lately"
        );
        let later = t0 + TOPIC_SILENT_AFTER + Duration::from_millis(1);
        assert!(
            !acks.suspect("orders", later),
            "silent, but so is everyone: wait"
        );
        acks.acked("payments", later);
        assert!(
            acks.suspect("orders", later),
            "silent while others are answered"
        );
        let much_later = later + BROKER_ANSWERING_WITHIN;
        assert!(
            !acks.suspect("orders", much_later),
            "the broker answers no one: wait"
        );
        let alone = Acks::default();
        alone.acked("orders", t0);
        assert!(
            !alone.suspect("orders", t0 + Duration::from_secs(5)),
            "one topic, slow: the broker is slow"
        );
    }
}
