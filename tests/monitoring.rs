//! The alert rules and the Grafana dashboard in deploy/ hold together:
//! promtool accepts the rules and their unit tests pass; the dashboard is
//! JSON whose every query is valid PromQL; every metric either one names is
//! declared in src/metrics.rs's table (`tickler::metrics::METRICS`), so
//! renaming a metric breaks this build instead of silently blinding an
//! alert; and every alert's runbook_url lands on a heading of
//! docs/operations.md. (Held in tests/deploy.rs until #47 rewrote it for the
//! image, the unit and the manifests; restored here.)
//!
//! Needs `promtool` (Debian's `prometheus` package, installed by
//! `scripts/services`). Without it these tests fail; they never skip.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

const RULES: &str = "deploy/prometheus/tickler-alerts.yml";
const RULE_TESTS: &str = "deploy/prometheus/tickler-alerts.test.yml";
const DASHBOARD: &str = "deploy/grafana/tickler.json";

/// A file of the repository, by its path from the repository's root.
fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// Runs promtool in the repository's root; panics with its output unless it
/// succeeds.
fn promtool(args: &[&str]) {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run promtool ({e}): run scripts/services, which installs it \
                 (Debian's prometheus package)"
            )
        });
    assert!(
        output.status.success(),
        "promtool {} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// Every panel of the dashboard but the row headers.
fn dashboard_panels(dashboard: &Value) -> Vec<&Value> {
    let panels = dashboard["panels"]
        .as_array()
        .expect("the dashboard has panels");
    panels
        .iter()
        .filter(|panel| panel["type"] != "row")
        .collect()
}

/// Every query of the dashboard, as (panel title, PromQL expression).
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard_panels(dashboard) {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        let targets = panel["targets"].as_array();
        assert!(
            targets.is_some_and(|targets| !targets.is_empty()),
            "panel {title:?} has a query"
        );
        for target in targets.into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("every query of panel {title:?} has an expr"));
            queries.push((title.to_owned(), expr.to_owned()));
        }
    }
    queries
}

/// Every `tickler_…` name in `text`, less the suffixes of a histogram's
/// series (`_bucket`, `_sum`, `_count`).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("tickler_") {
        let inside_a_word = rest[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let from = &rest[start..];
        let len = from
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(from.len());
        if !inside_a_word {
            let mut name = &from[..len];
            for suffix in ["_bucket", "_sum", "_count"] {
                name = name.strip_suffix(suffix).unwrap_or(name);
            }
            names.insert(name.to_owned());
        }
        rest = &from[len..];
    }
    names
}

/// GitHub's anchor of a Markdown heading: lowercase, spaces to hyphens,
/// other punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn alert_rules_pass_promtool_check() {
    promtool(&["check", "rules", RULES]);
}

#[test]
fn alert_rules_pass_their_unit_tests() {
    promtool(&["test", "rules", RULE_TESTS]);
}

#[test]
fn dashboard_is_json_whose_panels_query_the_chosen_prometheus() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("the dashboard has variables");
    assert!(
        variables
            .iter()
            .any(|v| v["name"] == "DS_PROMETHEUS" && v["type"] == "datasource"),
        "a datasource variable DS_PROMETHEUS lets whoever imports it pick a Prometheus"
    );
    for panel in dashboard_panels(&dashboard) {
        assert_eq!(
            panel["datasource"]["uid"], "${DS_PROMETHEUS}",
            "panel {} queries the chosen Prometheus",
            panel["title"]
        );
    }
    assert!(dashboard_queries(&dashboard).len() > 20);
}

#[test]
fn dashboard_queries_are_valid_promql() {
    // promtool parses PromQL only inside rules: one recording rule per query,
    // Grafana's variables replaced by values they may take.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (_title, expr)) in dashboard_queries(&dashboard()).iter().enumerate() {
        let expr = expr
            .replace("$__rate_interval", "5m")
            .replace("$job", "tickler");
        // A JSON string is also a double-quoted YAML string.
        let quoted = serde_json::to_string(&expr).unwrap();
        rules.push_str(&format!(
            "      - record: dashboard_query_{i}\n        expr: {quoted}\n"
        ));
    }
    let path = std::env::temp_dir().join(format!("tickler-dashboard-{}.yml", std::process::id()));
    std::fs::write(&path, rules).unwrap();
    promtool(&["check", "rules", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn every_metric_the_alerts_and_dashboard_use_is_defined_in_src_metrics() {
    let mut used = metric_names(&read(RULES));
    used.extend(metric_names(&read(DASHBOARD)));
    assert!(used.len() > 20, "metric names found: {used:?}");
    let missing: Vec<&String> = used
        .iter()
        .filter(|name| !tickler::metrics::METRICS.iter().any(|m| m.name == *name))
        .collect();
    assert!(
        missing.is_empty(),
        "{RULES} or {DASHBOARD} use metrics that src/metrics.rs does not define \
         (renamed or removed?): {missing:?}"
    );
}

#[test]
fn every_alert_links_to_its_runbook_heading_in_operations_md() {
    let rules = read(RULES);
    let anchors: BTreeSet<String> = read("docs/operations.md")
        .lines()
        .filter(|line| line.starts_with('#'))
        .map(|line| anchor(line.trim_start_matches('#')))
        .collect();
    let alerts = rules
        .lines()
        .filter(|line| line.trim_start().starts_with("- alert:"))
        .count();
    let links: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("runbook_url:"))
        .map(|url| url.trim().trim_matches('"'))
        .collect();
    assert!(alerts > 0);
    assert_eq!(links.len(), alerts, "every alert has a runbook_url");
    for link in links {
        let target = link
            .strip_prefix("docs/operations.md#")
            .unwrap_or_else(|| panic!("{link} points into docs/operations.md"));
        assert!(
            anchors.contains(target),
            "{link}: docs/operations.md has no heading with the anchor {target:?}"
        );
    }
}
