//! The consumer groups that read tickler's topics (#59): where each stands
//! (its committed offsets, beside each partition's end), read without
//! joining it, and which groups are found reading a topic (their members'
//! assignments).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

/// Where a group stands on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupPosition {
    pub partition: i32,
    /// The next offset the group will read; None: it committed nothing.
    pub committed: Option<i64>,
    /// The partition's end: the offset the next record will take.
    pub high: i64,
}

/// A reader of one group's offsets: a client with the group's id that
/// never joins it (no subscription), kept between readings.
pub struct GroupReader {
    consumer: BaseConsumer,
}

impl GroupReader {
    pub fn new(
        brokers: &str,
        options: &BTreeMap<String, String>,
        group: &str,
    ) -> Result<GroupReader, KafkaError> {
        let mut client = super::client_config(brokers);
        for (key, value) in options {
            client.set(key, value);
        }
        let consumer = client
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()?;
        Ok(GroupReader { consumer })
    }

    /// Where the group stands on each partition of `topic`, within `wait`
    /// (blocking). A topic the broker lacks has no partitions.
    pub fn positions(&self, topic: &str, wait: Duration) -> Result<Vec<GroupPosition>, KafkaError> {
        let deadline = Instant::now() + wait;
        let left = || {
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        };
        let metadata = self.consumer.fetch_metadata(Some(topic), left())?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let mut wanted = TopicPartitionList::new();
        for partition in &partitions {
            wanted.add_partition(topic, *partition);
        }
        let committed = self.consumer.committed_offsets(wanted, left())?;
        let mut positions = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let (_, high) = self.consumer.fetch_watermarks(topic, partition, left())?;
            let committed = match committed
                .find_partition(topic, partition)
                .map(|p| p.offset())
            {
                Some(Offset::Offset(at)) if at >= 0 => Some(at),
                _ => None,
            };
            positions.push(GroupPosition {
                partition,
                committed,
                high,
            });
        }
        Ok(positions)
    }

    /// The consumer groups whose members are assigned partitions of any
    /// of `topics`, by topic (blocking; within `wait`). Brokers that do not
    /// answer ListGroups or DescribeGroups give an error.
    pub fn groups_reading(
        &self,
        topics: &BTreeSet<String>,
        wait: Duration,
    ) -> Result<BTreeMap<String, BTreeSet<String>>, KafkaError> {
        let list = self.consumer.fetch_group_list(None, wait)?;
        let mut reading: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for group in list.groups() {
            if group.protocol_type() != "consumer" {
                continue;
            }
            for member in group.members() {
                let Some(assignment) = member.assignment() else {
                    continue;
                };
                for topic in assigned_topics(assignment) {
                    if topics.contains(&topic) {
                        reading
                            .entry(topic)
                            .or_default()
                            .insert(group.name().to_owned());
                    }
                }
            }
        }
        Ok(reading)
    }
}

/// The topics of a consumer-protocol member assignment: a version (int16),
/// then an array (int32 count) of topic (int16 length, bytes) and its
/// partitions (int32 count, int32 each). What does not parse names none.
pub fn assigned_topics(assignment: &[u8]) -> Vec<String> {
    let mut at = 2; // the version
    let mut topics = Vec::new();
    let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
        let bytes = assignment.get(*at..*at + n)?;
        *at += n;
        Some(bytes)
    };
    let Some(count) = take(&mut at, 4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]])) else {
        return topics;
    };
    for _ in 0..count.clamp(0, 10_000) {
        let Some(len) = take(&mut at, 2).map(|b| i16::from_be_bytes([b[0], b[1]])) else {
            break;
        };
        let Some(name) = take(&mut at, len.max(0) as usize) else {
            break;
        };
        topics.push(String::from_utf8_lossy(name).into_owned());
        let Some(partitions) =
            take(&mut at, 4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        else {
            break;
        };
        if take(&mut at, 4 * partitions.clamp(0, 100_000) as usize).is_none() {
            break;
        }
    }
    topics
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut bytes = vec![0, 1];
        bytes.extend((topics.len() as i32).to_be_bytes());
        for (topic, partitions) in topics {
            bytes.extend((topic.len() as i16).to_be_bytes());
            bytes.extend(topic.as_bytes());
            bytes.extend((partitions.len() as i32).to_be_bytes());
            for p in *partitions {
                bytes.extend(p.to_be_bytes());
            }
        }
        bytes.extend(0i32.to_be_bytes()); // user data: none
        bytes
    }

    #[test]
    fn an_assignment_names_its_topics_and_garbage_names_none_or_some() {
        let bytes = assignment(&[("orders", &[0, 1]), ("billing", &[3])]);
        assert_eq!(assigned_topics(&bytes), vec!["orders", "billing"]);
        assert!(assigned_topics(&[]).is_empty());
        assert!(assigned_topics(&[0, 1, 0xff, 0xff, 0xff, 0xff]).is_empty());
        // Cut short: what parsed before the cut.
        assert_eq!(assigned_topics(&bytes[..20]), vec!["orders"]);
    }
}
