//! The store's methods on `api_tokens` (src/store/tokens.rs): a token is
//! stored by the hash of its secret, its name stays taken for good, and a
//! revoked token is listed but no longer accepted.

use tickler::store::{NewToken, StoreError};
use tickler_testkit::store::Db;

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_stores_the_token_as_given_and_refuses_a_taken_name_or_secret() {
    let db = Db::new().await;
    let topics = strings(&["billing.*", "audit"]);
    let scopes = strings(&["read", "write"]);
    let before = db.store.db_now().await.unwrap();
    let token = db
        .store
        .token_create(&NewToken {
            name: "billing-svc",
            secret_sha256: [7; 32],
            topics: &topics,
            scopes: &scopes,
            rate_requests: Some(50),
            rate_jobs: None,
            max_pending_jobs: None,
            max_payload_bytes: None,
        })
        .await
        .unwrap();
    assert_eq!(token.name, "billing-svc");
    assert_eq!(token.secret_sha256, [7; 32]);
    assert_eq!(
        (token.topics, token.scopes),
        (topics.clone(), scopes.clone())
    );
    assert_eq!((token.rate_requests, token.rate_jobs), (Some(50), None));
    assert!(token.created_at >= before);
    assert_eq!(token.revoked_at, None);

    let another = |name: &'static str, secret: u8| NewToken {
        name,
        secret_sha256: [secret; 32],
        topics: &topics,
        scopes: &scopes,
        rate_requests: None,
        rate_jobs: Some(0),
        max_pending_jobs: None,
        max_payload_bytes: None,
    };
    for (name, secret, why) in [
        ("billing-svc", 8, "the same name"),
        ("Billing-Svc", 8, "names compare without regard to case"),
        ("other", 7, "the same secret"),
    ] {
        assert!(
            matches!(
                db.store.token_create(&another(name, secret)).await,
                Err(StoreError::DuplicateKey)
            ),
            "{why}"
        );
    }
    let other = db.store.token_create(&another("other", 8)).await.unwrap();
    assert_eq!((other.rate_requests, other.rate_jobs), (None, Some(0)));
    assert_eq!(db.store.token_list().await.unwrap().len(), 2);
    db.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_listed_but_not_active_and_its_name_stays_taken() {
    let db = Db::new().await;
    let all = strings(&["*"]);
    let scopes = strings(&["read"]);
    let make = |name: &'static str, secret: u8| NewToken {
        name,
        secret_sha256: [secret; 32],
        topics: &all,
        scopes: &scopes,
        rate_requests: None,
        rate_jobs: None,
        max_pending_jobs: None,
        max_payload_bytes: None,
    };
    for (name, secret) in [("zeta", 1), ("alpha", 2), ("mid", 3)] {
        db.store.token_create(&make(name, secret)).await.unwrap();
    }
    let names = |tokens: Vec<tickler::store::TokenRow>| {
        let mut names: Vec<String> = tokens.into_iter().map(|t| t.name).collect();
        names.sort_unstable();
        names
    };
    assert_eq!(
        names(db.store.tokens_active().await.unwrap()),
        ["alpha", "mid", "zeta"]
    );

    assert!(db.store.token_revoke("mid").await.unwrap());
    let listed = db.store.token_list().await.unwrap();
    assert_eq!(
        listed.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["alpha", "mid", "zeta"],
        "every token, by name"
    );
    let revoked_at = listed[1].revoked_at.expect("revoked");
    assert!(listed[0].revoked_at.is_none() && listed[2].revoked_at.is_none());
    assert_eq!(
        names(db.store.tokens_active().await.unwrap()),
        ["alpha", "zeta"]
    );

    assert!(
        db.store.token_revoke("mid").await.unwrap(),
        "revoked already: still found"
    );
    assert_eq!(
        db.store.token_list().await.unwrap()[1].revoked_at,
        Some(revoked_at),
        "the first revocation's time stays"
    );
    assert!(!db.store.token_revoke("nobody").await.unwrap());
    assert!(
        db.store.token_revoke("ZETA").await.unwrap(),
        "names compare without regard to case"
    );
    assert_eq!(names(db.store.tokens_active().await.unwrap()), ["alpha"]);
    assert!(matches!(
        db.store.token_create(&make("mid", 9)).await,
        Err(StoreError::DuplicateKey)
    ));
    db.finish().await;
}
