//! The role table (`tickler::app::services`) holds against running
//! instances: an instance starts the services of its roles' rows and of
//! every instance's, each under its name, and nothing else — so which
//! services a role runs is read in one place.

use std::collections::BTreeSet;

use tickler::app;
use tickler::config::{Config, Role};
use tickler_testkit::{database_create, database_drop, test_config, unique};
use tokio_util::sync::CancellationToken;

/// Starts an instance of `roles`, and returns the services it started.
async fn started(roles: &[Role], adjust: impl FnOnce(&mut Config)) -> BTreeSet<&'static str> {
    let (name, url) = database_create().await;
    let mut config = test_config(&url, &unique("tickler-t-"));
    config.roles = roles.to_vec();
    adjust(&mut config);
    let running = app::start(config, CancellationToken::new())
        .await
        .expect("starts");
    let services: BTreeSet<&'static str> = running.services().into_iter().collect();
    running.shutdown().await;
    database_drop(&name).await;
    services
}

/// What the table gives `roles`, with every instance's row.
fn table(roles: &[Role]) -> BTreeSet<&'static str> {
    std::iter::once(None)
        .chain(roles.iter().copied().map(Some))
        .flat_map(|role| app::services(role).iter().copied())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_starts_its_row_of_the_table_and_nothing_else() {
    let all = Role::ALL.to_vec();
    let services = started(&all, |_| {}).await;
    let expected = table(&all);
    assert!(
        services.is_subset(&expected),
        "started beyond the table: {:?}",
        services.difference(&expected).collect::<Vec<_>>()
    );
    // What only a setting asks for is all that is missing: the metrics
    // listener (api.metrics_addr), the ingress (ingress.topics) and the
    // overdue caps (a topic's max_overdue).
    let missing: BTreeSet<&str> = expected.difference(&services).copied().collect();
    assert_eq!(
        missing,
        BTreeSet::from(["ingress", "metrics", "overdue caps"]),
        "{services:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loader_alone_runs_its_row_and_every_instances() {
    let services = started(&[Role::Loader], |_| {}).await;
    assert_eq!(
        services,
        BTreeSet::from([
            "membership",
            "topic controls",
            "codec upkeep",
            "clock guard",
            "tzdata",
            "loader",
            "materializer",
        ]),
        "no topics refresh without the api, the dispatcher or the ingress"
    );
}

#[test]
fn each_service_has_one_row() {
    let rows = std::iter::once(None).chain(Role::ALL.into_iter().map(Some));
    let mut seen = BTreeSet::new();
    for role in rows {
        for service in app::services(role) {
            assert!(seen.insert(*service), "{service:?} is in two rows");
        }
    }
}
