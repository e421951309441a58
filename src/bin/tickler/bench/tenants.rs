//! The tenants stage (#46): fair dispatch by tenant, measured. A small
//! tenant's jobs due at one instant, first alone, then beside a big
//! tenant's burst on the same topic grouped by key prefix (each group held
//! to `tenants_group_pace` a second), then the same two bursts on a topic
//! that is not grouped. Prints the small tenant's lateness in each: with
//! the grouping it should stay at its idle figure.

use std::time::Duration;

use anyhow::bail;
use chrono::Utc;
use serde_json::{json, Value};

use super::{percentiles, Bench};

impl Bench {
    /// Long because the stage is three measurements read in order (the small
    /// tenant alone, beside the big one grouped, beside it ungrouped), then
    /// the figures printed.
    pub(super) async fn tenants(&self) -> anyhow::Result<()> {
        let (big, small, pace) = (
            self.options.tenants_big,
            self.options.tenants_small,
            self.options.tenants_group_pace,
        );
        let topic = self.topic();
        let response = self
            .http
            .patch(format!("{}/v1/topics/{topic}", self.base_url()))
            .json(&json!({"group_by": "key::", "group_max_per_second": pace}))
            .send()
            .await?;
        if !response.status().is_success() {
            bail!("tenants: grouping the topic: {}", response.text().await?);
        }
        for (round, with_big, grouped) in [
            ("alone", 0, true),
            ("beside the big tenant, grouped", big, true),
            ("beside the big tenant, not grouped", big, false),
        ] {
            if !grouped {
                let response = self
                    .http
                    .patch(format!("{}/v1/topics/{topic}", self.base_url()))
                    .json(&json!({"group_by": null, "group_max_per_second": null}))
                    .send()
                    .await?;
                if !response.status().is_success() {
                    bail!("tenants: ungrouping the topic: {}", response.text().await?);
                }
                // Every instance reads the controls within a second.
                tokio::time::sleep(Duration::from_millis(1_500)).await;
            }
            let lead = 3 + (big + small) / 20_000;
            let due = Utc::now() + chrono::Duration::seconds(lead as i64);
            let keyed = |tenant: &str, i: u64| {
                let mut job = self.job(due, i);
                job["key"] = json!(format!("{tenant}:{}-{i}", round.len()));
                job
            };
            // The big tenant's first, so that without a grouping the small
            // one's are behind them.
            let big_jobs: Vec<Value> = (0..with_big).map(|i| keyed("big", i)).collect();
            let mut ids = self.batches_created(big_jobs).await?;
            let small_jobs: Vec<Value> = (0..small).map(|i| keyed("small", i)).collect();
            let small_ids = self.batches_created(small_jobs).await?;
            ids.extend_from_slice(&small_ids);
            if Utc::now() >= due {
                bail!("tenants: creating the jobs took longer than the {lead} s lead");
            }
            let wait = Duration::from_secs(with_big / u64::from(pace) + 60);
            let seen = self.await_records(&ids, wait).await;
            if seen.len() != ids.len() {
                bail!(
                    "tenants {round}: {} of {} jobs arrived",
                    seen.len(),
                    ids.len()
                );
            }
            let seen_small = self.await_records(&small_ids, Duration::ZERO).await;
            let mut late: Vec<i64> = seen_small
                .iter()
                .map(|s| s.dispatched_at_ms - s.scheduled_at_ms)
                .collect();
            let last_big = seen
                .iter()
                .map(|s| s.dispatched_at_ms - s.scheduled_at_ms)
                .max()
                .unwrap_or(0);
            let line = format!(
                "tenants: {small} jobs of a small tenant {round}{}: lateness {}",
                if with_big > 0 {
                    format!(
                        " ({with_big} jobs, the last {:.1} s late)",
                        last_big as f64 / 1000.0
                    )
                } else {
                    String::new()
                },
                percentiles(&mut late)
            );
            println!("{line}");
        }
        Ok(())
    }
}
