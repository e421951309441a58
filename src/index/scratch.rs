//! Scratch state for `tickler bench` (and the tests): Redis's memory
//! figure, and wiping one deployment's keys. No serving role uses it.

use redis::AsyncCommands;

use super::{Index, IndexError};

impl Index {
    /// Bytes of memory Redis uses in all (`INFO memory`, `used_memory`).
    pub async fn memory_used(&self) -> Result<u64, IndexError> {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.conn.clone())
            .await?;
        info.lines()
            .find_map(|line| line.strip_prefix("used_memory:"))
            .and_then(|value| value.trim().parse().ok())
            .ok_or_else(|| IndexError::Protocol("INFO memory has no used_memory".to_owned()))
    }

    /// Deletes every key of this deployment (what a FLUSHALL does to it),
    /// leaving other prefixes alone. Returns how many keys went.
    pub async fn clear(&self) -> Result<u64, IndexError> {
        let mut conn = self.conn.clone();
        if self.is_cluster() {
            // SCAN walks one node; on a cluster, delete the keys of the
            // current layout one shard (one slot) at a time.
            let mut deleted = 0;
            for shard in 0..self.shards() {
                for key in [
                    self.due_key(shard),
                    self.inflight_key(shard),
                    self.sentinel_key(shard),
                ] {
                    let n: u64 = conn.del(&key).await?;
                    deleted += n;
                }
            }
            return Ok(deleted);
        }
        let pattern = format!("{{{}:*", self.prefix);
        let mut cursor: u64 = 0;
        let mut deleted = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            for key in keys {
                let n: u64 = conn.del(&key).await?;
                deleted += n;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }
}
