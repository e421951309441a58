//! CPU time per component on this machine (Linux `/proc`): which of MySQL,
//! Redis, the broker and tickler spends the cores during a stage. Elsewhere
//! it prints nothing.

use std::collections::BTreeMap;

/// The processes counted, by their command name.
const COMPONENTS: [&str; 5] = ["mariadbd", "mysqld", "redis-server", "tansu", "tickler"];

/// CPU seconds (user + system) so far, summed per component.
pub(super) fn by_process() -> BTreeMap<&'static str, f64> {
    // USER_HZ: 100 on every Linux this runs on.
    const TICKS: f64 = 100.0;
    let mut spent = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return spent;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid … utime stime …": comm may hold spaces.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let Some(component) = COMPONENTS.iter().find(|c| comm.starts_with(*c)) else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        // After the comm: state is field 3, utime 14 and stime 15 (1-based).
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        *spent.entry(*component).or_insert(0.0) += (ticks(11) + ticks(12)) / TICKS;
    }
    spent
}

/// What each component spent since `before`, largest first, as text.
pub(super) fn spent_since(before: &BTreeMap<&'static str, f64>) -> String {
    let now = by_process();
    let mut spent: Vec<(&str, f64)> = now
        .iter()
        .map(|(name, total)| (*name, total - before.get(name).copied().unwrap_or(0.0)))
        .filter(|(_, s)| *s > 0.0)
        .collect();
    spent.sort_by(|a, b| b.1.total_cmp(&a.1));
    if spent.is_empty() {
        return "not measured".to_owned();
    }
    spent
        .iter()
        .map(|(name, s)| format!("{name} {s:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `; the database N µs a job` for `jobs` since `before` (empty when the
/// database server's CPU is not seen from here).
pub(super) fn database_per_job(before: &BTreeMap<&'static str, f64>, jobs: u64) -> String {
    let database = |spent: &BTreeMap<&'static str, f64>| {
        spent.get("mariadbd").or(spent.get("mysqld")).copied()
    };
    match (database(&by_process()), database(before)) {
        (Some(now), Some(then)) if jobs > 0 => {
            format!(
                "; the database {:.1} µs a job",
                (now - then) * 1e6 / jobs as f64
            )
        }
        _ => String::new(),
    }
}

/// Waits until the database server is quiet — under a tenth of a core over
/// half a second — or `most` has passed; returns how long it waited. What a
/// stage before left behind (InnoDB's purge, flushing dirty pages) then
/// does not count against the next.
pub(super) async fn database_quiet(most: std::time::Duration) -> std::time::Duration {
    const SAMPLE: std::time::Duration = std::time::Duration::from_millis(500);
    let started = std::time::Instant::now();
    let database = |spent: &BTreeMap<&'static str, f64>| {
        spent
            .get("mariadbd")
            .or(spent.get("mysqld"))
            .copied()
            .unwrap_or(0.0)
    };
    while started.elapsed() < most {
        let before = database(&by_process());
        tokio::time::sleep(SAMPLE).await;
        if database(&by_process()) - before < SAMPLE.as_secs_f64() / 10.0 {
            break;
        }
    }
    started.elapsed()
}
