use super::env::{env_list, env_map};
use super::*;

#[test]
fn the_doubts_timing_is_tickler_s_own_and_leaves_time_to_send() {
    let mut config = Config::default();
    config
        .kafka
        .options
        .insert("message.timeout.ms".to_owned(), "60000".to_owned());
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("kafka.message_timeout_ms"), "{err}");
    let mut config = Config::default();
    config.kafka.doubt_margin_ms = 30_000;
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("claim_lease_ms"), "{err}");
    let mut config = Config::default();
    config.kafka.doubt_margin_ms = 30_000;
    config.dispatcher.claim_lease_ms = 41_000;
    assert!(config.validate().is_ok());
}

#[test]
fn kafka_options_may_not_change_a_safety_setting_and_the_refusal_names_it() {
    for key in [
        "acks",
        "enable.idempotence",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "isolation.level",
        "group.id",
        "transactional.id",
        "delivery.timeout.ms",
    ] {
        let mut config = Config::default();
        config.kafka.options.insert(key.to_owned(), "1".to_owned());
        let err = config.validate().unwrap_err().to_string();
        assert!(
            err.contains("kafka.options") && err.contains(&format!("may not set {key}:")),
            "{key}: {err}"
        );
    }
    let mut config = Config::default();
    config
        .kafka
        .options
        .insert("security.protocol".to_owned(), "SSL".to_owned());
    config
        .kafka
        .options
        .insert("compression.type".to_owned(), "zstd".to_owned());
    assert!(config.validate().is_ok(), "others pass through");
}

#[test]
fn a_webhooks_secret_path_is_masked_where_the_settings_are_shown() {
    let mut config = Config::default();
    config.notify.webhook_url =
        Some("https://hooks.slack.com/services/T000/B000/XXXXsecretXXXX".to_owned());
    let shown = config.masked();
    assert_eq!(
        shown["notify"]["webhook_url"],
        serde_json::json!("https://hooks.slack.com/***")
    );
    for secret in ["XXXXsecretXXXX", "T000", "/services"] {
        assert!(!shown.to_string().contains(secret), "{secret} in {shown}");
    }
    assert_eq!(
        url_path_masked("https://u:pw@hooks.example:8443/hooks/abc?x=1#f"),
        "https://u:***@hooks.example:8443/***"
    );
    assert_eq!(
        url_path_masked("https://hooks.example"),
        "https://hooks.example"
    );
    assert_eq!(url_path_masked("not a url /abc"), "***");
}

#[test]
fn the_printed_configuration_masks_every_secret() {
    let mut config = Config::default();
    config.mysql.url = "mysql://tickler:hunter2@db:3306/tickler?ssl-mode=required".to_owned();
    config.redis.url = "redis://:pw@r1:6379,redis://r2:6379".to_owned();
    config.notify.webhook_url = Some("https://hooks.example/x?token=abc&x=1".to_owned());
    config
        .kafka
        .options
        .insert("sasl.password".to_owned(), "s3cret".to_owned());
    config
        .kafka
        .options
        .insert("security.protocol".to_owned(), "SASL_SSL".to_owned());
    let shown = config.masked().to_string();
    for secret in ["hunter2", ":pw@", "s3cret", "abc"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(
        shown.contains("mysql://tickler:***@db:3306/tickler?ssl-mode=required"),
        "{shown}"
    );
    assert!(shown.contains("SASL_SSL"));
    assert!(shown.contains("\"https://hooks.example/***\""), "{shown}");

    let mut sentinel = Config::default();
    sentinel.redis.url =
        "redis+sentinel://app:pw1@s1:26379,s2:26379/m?sentinel_password=pw2".to_owned();
    let shown = sentinel.masked().to_string();
    for secret in ["pw1", "pw2"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(
        shown.contains("redis+sentinel://app:***@s1:26379,s2:26379/m?sentinel_password=***"),
        "{shown}"
    );
}

#[test]
fn a_default_lease_follows_a_raised_message_timeout_and_a_set_one_is_checked() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("TICKLER_KAFKA_MESSAGE_TIMEOUT_MS", "10000");
        let config = Config::load(None).map_err(|e| e.to_string())?;
        assert_eq!(config.dispatcher.claim_lease_ms, 20 + 10_000 + 2_000 + 500);
        jail.set_env("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "6000");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("claim_lease_ms"), "{err}");
        Ok(())
    });
}

#[test]
fn a_sentinel_redis_url_is_taken_and_tls_files_need_a_tls_scheme() {
    let sentinel = |url: &str| {
        let mut config = Config::default();
        config.redis.url = url.to_owned();
        config
    };
    sentinel("redis+sentinel://s1:26379,s2:26379/m")
        .validate()
        .unwrap();
    let mut tls = sentinel("rediss+sentinel://s1/m");
    tls.redis.tls_ca = Some("/ca.pem".to_owned());
    tls.validate().unwrap();
    let mut plain = sentinel("redis+sentinel://s1/m");
    plain.redis.tls_ca = Some("/ca.pem".to_owned());
    let err = plain.validate().unwrap_err().to_string();
    assert!(err.contains("rediss+sentinel://"), "{err}");
    let err = sentinel("sentinel://s1/m")
        .validate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("redis+sentinel://"), "{err}");
}

#[test]
fn lists_and_maps_have_environment_forms_people_type() {
    assert_eq!(env_list("api,dispatcher"), ["api", "dispatcher"]);
    assert_eq!(env_list(" [api, dispatcher] "), ["api", "dispatcher"]);
    assert_eq!(env_list(r#"["api","results"]"#), ["api", "results"]);
    assert!(env_list("").is_empty());
    let map = env_map(r#"{security.protocol="SSL",ssl.ca.location="/path/ca.pem"}"#).unwrap();
    assert_eq!(map["security.protocol"], "SSL");
    assert_eq!(map["ssl.ca.location"], "/path/ca.pem");
    let quoted =
        env_map(r#"{"security.protocol"="SSL", "ssl.ca.location"="/path/ca.pem"}"#).unwrap();
    assert_eq!(quoted, map);
    let typed = env_map("{linger.ms=5, enable.idempotence=true}").unwrap();
    assert_eq!(
        (
            typed["linger.ms"].as_str(),
            typed["enable.idempotence"].as_str()
        ),
        ("5", "true")
    );
    let err = env_map("security.protocol=SSL").unwrap_err();
    assert!(err.contains("inline table"), "{err}");
    let err = env_map("{sasl.password=hunter2 oops}").unwrap_err();
    assert!(
        !err.contains("hunter2"),
        "a refused value is never echoed: {err}"
    );
}

#[test]
fn defaults_are_valid_and_point_at_local_services() {
    let config = Config::default();
    config.validate().unwrap();
    assert!(config.mysql.url.contains("127.0.0.1:3306"));
    assert_eq!(config.kafka.brokers, "127.0.0.1:9092");
    assert_eq!(config.cluster.shards, 16);
    assert_eq!(config.window(), Duration::from_secs(600));
    for role in Role::ALL {
        assert!(config.has_role(role), "{role} runs by default");
    }
}

#[test]
fn file_then_environment_override_defaults() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("tickler.toml", "shards = 8\nredis_prefix = \"from-file\"\n")?;
        jail.set_env("TICKLER_REDIS_PREFIX", "from-env");
        jail.set_env("TICKLER_ROLES", "[api]");
        let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
        assert_eq!(config.cluster.shards, 8);
        assert_eq!(config.redis.prefix, "from-env");
        assert_eq!(config.roles, vec![Role::Api]);
        Ok(())
    });
}

#[test]
fn flat_names_of_before_the_sections_are_read_as_their_new_ones_and_named() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "tickler.toml",
            "window_ms = 300000\nclaim_lease_ms = 9000\n[loader]\nbatch = 700\n[kafka]\nbrokers = \"k:9092\"\n",
        )?;
        jail.set_env("TICKLER_SHARDS", "8");
        jail.set_env("TICKLER_DISPATCH_BATCH", "100");
        // Both names: the new one wins.
        jail.set_env("TICKLER_DISPATCHER_BATCH", "200");
        jail.set_env("TICKLER_LOADER_INTERVAL_MS", "500");
        // Kept for good (the contract names it): read, no warning.
        jail.set_env("TICKLER_HTTP_ADDR", "127.0.0.1:9999");
        let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
        assert_eq!(config.api.addr, "127.0.0.1:9999");
        assert_eq!(config.loader.window_ms, 300_000);
        assert_eq!(config.dispatcher.claim_lease_ms, 9_000);
        assert_eq!(config.loader.batch, 700);
        assert_eq!(config.kafka.brokers, "k:9092");
        assert_eq!(config.cluster.shards, 8);
        assert_eq!(config.dispatcher.batch, 200);
        assert_eq!(config.loader.interval_ms, 500);
        let renamed: Vec<(&str, &str)> = config
            .renamed
            .iter()
            .map(|(old, new)| (old.as_str(), new.as_str()))
            .collect();
        for pair in [
            ("window_ms", "loader.window_ms"),
            ("claim_lease_ms", "dispatcher.claim_lease_ms"),
            ("TICKLER_SHARDS", "TICKLER_CLUSTER_SHARDS"),
            ("TICKLER_DISPATCH_BATCH", "TICKLER_DISPATCHER_BATCH"),
        ] {
            assert!(renamed.contains(&pair), "{pair:?} in {renamed:?}");
        }
        // A name already new, and one that is the same either way, are
        // no renaming.
        assert_eq!(renamed.len(), 4, "{renamed:?}");
        // What `tickler config` prints is the new form.
        let shown = config.masked();
        assert_eq!(shown["loader"]["window_ms"], 300_000);
        assert!(shown.get("window_ms").is_none(), "{shown}");
        Ok(())
    });
    // Every flat name maps to a setting that exists, and no two share one.
    let keys = Config::keys();
    let mut seen = std::collections::HashSet::new();
    for (old, new) in RENAMED {
        assert!(keys.iter().any(|k| k == new), "{old} -> {new}");
        assert!(seen.insert(*new), "{new} twice");
        assert!(!keys.iter().any(|k| k == old), "{old} is still a key");
    }
}

#[test]
fn bad_values_are_named_in_the_error() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("TICKLER_CLUSTER_SHARDS", "0");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("shards"), "{err}");
        jail.set_env("TICKLER_CLUSTER_SHARDS", "many");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(
            err.contains("cluster.shards") && err.contains("TICKLER_CLUSTER_SHARDS"),
            "{err}"
        );
        jail.set_env("TICKLER_CLUSTER_SHARDS", "8");
        jail.set_env("TICKLER_ROLES", "[api, reaper]");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(
            err.contains("\"reaper\"") && err.contains("TICKLER_ROLES"),
            "{err}"
        );
        Ok(())
    });
    figment::Jail::expect_with(|jail| {
        jail.create_file("tickler.toml", "roles = [\"api\", \"reaper\"]\n")?;
        let err = Config::load(Some(Path::new("tickler.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("reaper") && err.contains("roles"), "{err}");
        Ok(())
    });
    let mut config = Config::default();
    config.jobs.retention_days = 40_000;
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("retention_days"), "{err}");
    let mut config = Config::default();
    config.dispatcher.lookahead_ms = 5_000;
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("dispatcher.lookahead_ms"), "{err}");
    // Absurd durations are refused at start-up, not met as an overflow
    // in a role (a lease added to an instant, a window to a time).
    figment::Jail::expect_with(|jail| {
        jail.set_env("TICKLER_DISPATCHER_CLAIM_LEASE_MS", u64::MAX.to_string());
        let err = Config::load(None).unwrap_err().to_string();
        assert!(
            err.contains("claim_lease_ms must be at most 315360000000"),
            "{err}"
        );
        jail.set_env("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "30000");
        jail.set_env(
            "TICKLER_LOADER_WINDOW_MS",
            (DURATION_MAX_MS + 1).to_string(),
        );
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("window_ms must be at most"), "{err}");
        jail.set_env("TICKLER_LOADER_WINDOW_MS", DURATION_MAX_MS.to_string());
        assert!(Config::load(None).is_ok());
        Ok(())
    });
}

#[test]
fn topics_override_the_default_policy() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "tickler.toml",
            "default_max_attempts = 3\ndead_letter_topic = \"all.dead\"\n\
             [topics.\"orders.reminders\"]\nexpects_result = true\nack_timeout_ms = 60000\n\
             [topics.quiet]\ndead_letter_topic = \"\"\n",
        )?;
        let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
        let policy = config.topic_rules().policy_for("orders.reminders");
        assert!(policy.expects_result);
        assert_eq!(policy.ack_timeout_ms, 60_000);
        assert_eq!(policy.max_attempts, 3, "from the defaults");
        assert!(!config.topic_rules().policy_for("other").expects_result);
        assert_eq!(
            config.topic_rules().dead_letter_for("other"),
            Some("all.dead")
        );
        assert_eq!(config.topic_rules().dead_letter_for("quiet"), None);

        jail.create_file(
            "bad.toml",
            "[topics.\"orders\"]\nbackoff_base_ms = 5000\nbackoff_cap_ms = 10\n",
        )?;
        let err = Config::load(Some(Path::new("bad.toml")))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"orders\"") && err.contains("backoff_base_ms"),
            "{err}"
        );
        jail.create_file("typo.toml", "[topics.orders]\nmax_attempt = 5\n")?;
        let err = Config::load(Some(Path::new("typo.toml")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_attempt"), "{err}");
        Ok(())
    });
}

#[test]
fn tickler_and_kafka_topics_are_reserved() {
    let mut config = Config::default();
    config.jobs.dead_letter_topic = Some("dead".to_owned());
    config.topics.insert(
        "orders".to_owned(),
        TopicConfig {
            dead_letter_topic: Some("orders-dlq".to_owned()),
            ..TopicConfig::default()
        },
    );
    for topic in [
        "tickler.results",
        "dead",
        "orders-dlq",
        "__consumer_offsets",
    ] {
        assert!(
            config.topic_rules().topic_reserved(topic).is_some(),
            "{topic}"
        );
    }
    assert!(config.topic_rules().topic_reserved("orders").is_none());
    config.jobs.topics_allowed = vec!["orders*".to_owned()];
    assert!(config.topic_rules().topic_reserved("orders.eu").is_none());
    assert!(config.topic_rules().topic_reserved("payments").is_some());
    config.jobs.topics_allowed = vec!["bad pattern".to_owned()];
    assert!(config.validate().is_err());
}

#[test]
fn anonymous_access_stays_on_loopback_unless_allowed_on_purpose() {
    let mut config = Config::default();
    config.api.auth = AuthMode::None;
    config.api.addr = "0.0.0.0:8080".to_owned();
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("auth") && err.contains("allow_anonymous"),
        "{err}"
    );
    config.api.allow_anonymous = true;
    config.validate().unwrap();
    config.api.allow_anonymous = false;
    config.api.addr = "127.0.0.1:8080".to_owned();
    config.validate().unwrap();
    config.api.addr = "[::1]:8080".to_owned();
    config.validate().unwrap();
    config.api.addr = "0.0.0.0:8080".to_owned();
    config.api.auth = AuthMode::Tokens;
    config.validate().unwrap();
    config.roles = vec![Role::Dispatcher];
    config.api.auth = AuthMode::None;
    config.validate().unwrap();
}

#[test]
fn tls_settings_come_in_working_sets() {
    let mut config = Config::default();
    config.api.tls_cert = Some("cert.pem".to_owned());
    assert!(config
        .validate()
        .unwrap_err()
        .to_string()
        .contains("api.tls_key"));
    let mut config = Config::default();
    config.redis.tls_ca = Some("ca.pem".to_owned());
    assert!(config
        .validate()
        .unwrap_err()
        .to_string()
        .contains("rediss://"));
    let mut config = Config::default();
    config.redis.url = "rediss://127.0.0.1:6380".to_owned();
    config.redis.tls_ca = Some("ca.pem".to_owned());
    config.validate().unwrap();
}

#[test]
fn unknown_keys_in_a_file_are_refused() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("tickler.toml", "shard = 8\n")?;
        let err = Config::load(Some(Path::new("tickler.toml"))).unwrap_err();
        assert!(err.to_string().contains("shard"), "{err}");
        Ok(())
    });
}

#[test]
fn ingress_settings_come_from_a_file_or_one_environment_variable() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "tickler.toml",
            r#"
                [ingress]
                reply_topic = "tickler.replies"
                [ingress.topics."tickler.requests"]
                targets = ["orders.*"]
            "#,
        )?;
        let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
        assert_eq!(
            config.ingress.reply_topic.as_deref(),
            Some("tickler.replies")
        );
        assert_eq!(
            config.ingress.topics["tickler.requests"].targets,
            vec!["orders.*".to_owned()]
        );
        assert_eq!(config.ingress.group, "tickler-ingress", "the default stays");
        jail.set_env(
            "TICKLER_INGRESS",
            r#"{topics={"billing.requests"={targets=["billing.*"]}}, batch=50}"#,
        );
        let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
        assert_eq!(config.ingress.batch, 50);
        assert_eq!(
            config.ingress.topics["billing.requests"].targets,
            vec!["billing.*".to_owned()]
        );
        assert_eq!(
            config.ingress.reply_topic.as_deref(),
            Some("tickler.replies")
        );
        jail.set_env("TICKLER_INGRESS", "topics=");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(err.contains("TICKLER_INGRESS"), "{err}");
        Ok(())
    });
}

#[test]
fn ingress_topics_are_checked_and_reserved() {
    let mut config = Config::default();
    config.ingress.topics.insert(
        "tickler.requests".to_owned(),
        IngressTopic {
            targets: vec!["orders.*".to_owned()],
        },
    );
    config.ingress.reply_topic = Some("tickler.replies".to_owned());
    config.validate().unwrap();
    assert!(config
        .topic_rules()
        .topic_reserved("tickler.requests")
        .is_some());
    assert!(config
        .topic_rules()
        .topic_reserved("tickler.replies")
        .is_some());
    assert!(config.topic_rules().topic_reserved("orders.eu").is_none());

    let refused = |change: &dyn Fn(&mut Config), field: &str| {
        let mut bad = config.clone();
        change(&mut bad);
        let err = bad.validate().expect_err(field).to_string();
        assert!(err.contains(field), "{field}: {err}");
    };
    refused(
        &|c| {
            c.ingress
                .topics
                .get_mut("tickler.requests")
                .unwrap()
                .targets = Vec::new();
        },
        "ingress.topics",
    );
    refused(
        &|c| {
            c.ingress
                .topics
                .get_mut("tickler.requests")
                .unwrap()
                .targets = vec!["a b".to_owned()];
        },
        "ingress.topics",
    );
    refused(
        &|c| {
            c.ingress.topics.insert(
                "tickler.results".to_owned(),
                IngressTopic {
                    targets: vec!["*".to_owned()],
                },
            );
        },
        "ingress.topics",
    );
    refused(
        &|c| c.ingress.reply_topic = Some("tickler.requests".to_owned()),
        "ingress.reply_topic",
    );
    refused(
        &|c| c.ingress.group = c.results.group.clone(),
        "ingress.group",
    );
    refused(&|c| c.ingress.batch = 0, "ingress.batch");
    refused(
        &|c| {
            c.ingress.topics.insert(
                "r".repeat(INGRESS_TOPIC_MAX + 1),
                IngressTopic {
                    targets: vec!["*".to_owned()],
                },
            );
        },
        "ingress.topics",
    );
}

#[test]
fn a_smoothing_pace_of_zero_is_refused_and_unset_smooths_nothing() {
    let mut config = Config::default();
    assert_eq!(config.dispatcher.smooth_per_second, None);
    config.dispatcher.smooth_per_second = Some(0);
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("dispatcher.smooth_per_second"), "{err}");
    config.dispatcher.smooth_per_second = Some(1_000);
    assert!(config.validate().is_ok());
}

#[test]
fn a_topics_consumer_groups_are_group_ids() {
    let mut config = Config::default();
    config.topics.insert(
        "orders".to_owned(),
        TopicConfig {
            consumer_groups: Some(vec!["billing".to_owned(), String::new()]),
            ..TopicConfig::default()
        },
    );
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("topics.consumer_groups") && err.contains("\"orders\""),
        "{err}"
    );
    config.topics.get_mut("orders").unwrap().consumer_groups = Some(vec!["billing".to_owned()]);
    assert!(config.validate().is_ok());
    config.topics.get_mut("orders").unwrap().consumed_within_ms = Some(0);
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("topics.consumed_within_ms"), "{err}");
}

#[test]
fn verification_is_all_off_or_a_share_and_anything_else_names_the_setting() {
    use crate::domain::delivery::Verify;
    assert_eq!(Config::default().dispatcher.verify, Verify::All);
    for (text, verify) in [
        ("off", Verify::Off),
        ("all", Verify::All),
        ("0.1", Verify::Sample(0.1)),
        ("25%", Verify::Sample(0.25)),
    ] {
        figment::Jail::expect_with(|jail| {
            jail.set_env("TICKLER_DISPATCHER_VERIFY", text);
            assert_eq!(
                Config::load(None).unwrap().dispatcher.verify,
                verify,
                "{text}"
            );
            Ok(())
        });
    }
    figment::Jail::expect_with(|jail| {
        jail.set_env("TICKLER_DISPATCHER_VERIFY", "sometimes");
        let err = Config::load(None).unwrap_err().to_string();
        assert!(
            err.contains("dispatcher.verify") && err.contains("not `all`"),
            "{err}"
        );
        Ok(())
    });
}

#[test]
fn every_section_is_read_from_the_environment() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("TICKLER_AUDIT_RETENTION_DAYS", "30");
        jail.set_env("TICKLER_TRACING_OTLP_ENDPOINT", "http://collector:4318");
        jail.set_env("TICKLER_API_DRAIN_MS", "5000");
        jail.set_env("TICKLER_DISPATCHER_SMOOTH_PER_SECOND", "800");
        let config = Config::load(None).unwrap();
        assert_eq!(config.audit.retention_days, 30);
        assert_eq!(
            config.tracing.otlp_endpoint.as_deref(),
            Some("http://collector:4318")
        );
        assert_eq!(config.api.drain_ms, 5000);
        assert_eq!(config.dispatcher.smooth_per_second, Some(800));
        Ok(())
    });
    let defaults = Config::default();
    let shown = serde_json::to_value(&defaults).unwrap();
    for (section, value) in shown.as_object().unwrap() {
        if value.is_object() && !["topics", "ingress"].contains(&section.as_str()) {
            assert!(
                SECTIONS.contains(&section.as_str()),
                "{section} is not in SECTIONS"
            );
        }
    }
}

#[test]
fn a_trace_endpoints_credentials_are_masked() {
    let mut config = Config::default();
    config.tracing.otlp_endpoint = Some("https://tickler:s3cret@collector:4318".into());
    let shown = config.masked().to_string();
    assert!(
        !shown.contains("s3cret") && shown.contains("tickler:***@collector"),
        "{shown}"
    );
}

#[test]
fn a_trace_endpoint_must_be_http() {
    let mut config = Config::default();
    config.tracing.otlp_endpoint = Some("collector:4317".into());
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("tracing.otlp_endpoint"), "{err}");
}
