//! The broker's topics, kept fresh: the metadata [`Topics`] caches (for the
//! API's pre-flight check and the dispatcher) refreshed every
//! `kafka.topic_refresh_ms` as a service of every role that produces or
//! creates jobs.

use std::time::Duration;

use crate::kafka::Topics;
use crate::roles::service::Service;

/// Refreshes the topic metadata every `refresh`; a failed fetch is logged
/// and the topics known are kept.
impl Service for Topics {
    type Report = ();
    type Error = std::convert::Infallible;
    const NAME: &'static str = "kafka topics";
    const PASS: &'static str = "kafka topics";

    fn interval(&self) -> Duration {
        self.refresh_every()
    }

    async fn run_once(&mut self, _now: chrono::DateTime<chrono::Utc>) -> Result<(), Self::Error> {
        self.refresh_if_older(self.refresh_every() / 2).await;
        Ok(())
    }
}
