//! Unit tests of the broker Secret's parsing and address lists.

use super::*;

#[test]
fn prometheus_uri_is_checked_and_stripped_of_credentials() {
    let data = |p: &str| -> BTreeMap<String, Vec<u8>> {
        [
            ("uri", "amqp://guest:guest@h:5672/%2f"),
            ("managementUri", "http://h:15672"),
            ("prometheusUri", p),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
    };
    let ok = BrokerConnection::from_secret_data("s", &data("http://u:pw@h:15692/")).expect("valid");
    assert_eq!(
        ok.prometheus_base().map(Url::as_str),
        Some("http://h:15692/"),
        "no credentials are kept for an unauthenticated endpoint"
    );
    let empty = BrokerConnection::from_secret_data("s", &data("")).expect("empty is unset");
    assert!(empty.prometheus_base().is_none());
    for bad in ["ftp://h:15692", "http://h:15692/metrics", "not a uri"] {
        match BrokerConnection::from_secret_data("s", &data(bad)) {
            Err(BrokerError::InvalidSecret { key, .. }) => assert_eq!(key, "prometheusUri"),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

fn secret(uri: &str, management: &str) -> BTreeMap<String, Vec<u8>> {
    [("uri", uri), ("managementUri", management)]
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
}

fn invalid(data: &BTreeMap<String, Vec<u8>>) -> (String, String) {
    match BrokerConnection::from_secret_data("s", data) {
        Err(BrokerError::InvalidSecret { key, reason, .. }) => (key, reason),
        other => panic!("expected an invalid secret, got {other:?}"),
    }
}

#[test]
fn a_single_uri_is_one_address() {
    let c = BrokerConnection::from_secret_data(
        "s",
        &secret("amqp://u:p,w@one.test:5672/%2f", "http://one.test:15672"),
    )
    .expect("valid");
    assert_eq!(c.amqp_addresses().all().len(), 1);
    assert!(!c.amqp_addresses().several());
    // A raw comma in a password belongs to the URI (no scheme follows it).
    assert_eq!(c.password(), "p,w");
    assert_eq!(c.redacted_amqp_uri(), "amqp://u:***@one.test:5672/%2f");
    assert_eq!(c.amqp_addresses().position(0), "");
}

#[test]
fn uri_and_management_uri_list_the_nodes_of_a_cluster() {
    for uri in [
        "amqp://u:pw@a.list.test:5672/v,amqp://u:pw@b.list.test:5672/v,amqp://u:pw@c.list.test/v",
        "amqp://u:pw@a.list.test:5672/v\namqp://u:pw@b.list.test:5672/v\n  amqp://c.list.test/v\n",
        "amqp://u:pw@a.list.test:5672/v, amqp://u:pw@b.list.test:5672/v, amqp://c.list.test/v,",
    ] {
        let c = BrokerConnection::from_secret_data(
            "s",
            &secret(
                uri,
                "http://a.list.test:15672,http://b.list.test:15671/prefix",
            ),
        )
        .unwrap_or_else(|e| panic!("{uri:?}: {e}"));
        let hosts: Vec<&str> = c
            .amqp_addresses()
            .all()
            .iter()
            .filter_map(Url::host_str)
            .collect();
        assert_eq!(
            hosts,
            ["a.list.test", "b.list.test", "c.list.test"],
            "{uri:?}"
        );
        assert_eq!(
            (c.username(), c.password()),
            ("u", "pw"),
            "one user for all"
        );
        assert_eq!(c.management_addresses().all().len(), 2);
        assert_eq!(
            c.redacted_management_uris(),
            "http://u:***@a.list.test:15672/, http://u:***@b.list.test:15671/prefix"
        );
        assert_eq!(c.amqp_addresses().position(1), " (address 2 of 3)");
    }
}

#[test]
fn empty_entries_of_a_list_are_separators() {
    for (uri, management) in [
        (
            "amqp://u:pw@a.empty.test/v,,amqp://u:pw@b.empty.test/v",
            "http://a.empty.test:15672,,http://b.empty.test:15672",
        ),
        (
            "amqp://u:pw@a.empty.test/v,amqp://u:pw@b.empty.test/v,,",
            "http://a.empty.test:15672/,http://b.empty.test:15672/,,",
        ),
    ] {
        let c = BrokerConnection::from_secret_data("s", &secret(uri, management))
            .unwrap_or_else(|e| panic!("{uri:?} {management:?}: {e}"));
        let paths: Vec<&str> = c.amqp_addresses().all().iter().map(Url::path).collect();
        assert_eq!(paths, ["/v", "/v"], "{uri:?}");
        let bases: Vec<&str> = c
            .management_addresses()
            .all()
            .iter()
            .map(Url::as_str)
            .collect();
        assert_eq!(
            bases,
            ["http://a.empty.test:15672/", "http://b.empty.test:15672/"],
            "{management:?}"
        );
    }
}

#[test]
fn a_list_is_all_tls_or_all_plain() {
    let (key, reason) = invalid(&secret(
        "amqps://u:pw@a.tls.test/,amqp://u:pw@b.tls.test/",
        "https://a.tls.test:15671",
    ));
    assert_eq!(key, "uri");
    assert!(
        reason.starts_with("address 2 of 2: uses amqp:// while the first address uses amqps://"),
        "{reason}"
    );
    let (key, reason) = invalid(&secret(
        "amqps://u:pw@a.tls.test/",
        "https://a.tls.test:15671 http://b.tls.test:15672",
    ));
    assert_eq!(key, "managementUri");
    assert!(reason.contains("must use TLS alike"), "{reason}");
}

#[test]
fn the_addresses_must_agree_on_vhost_and_credentials() {
    let (key, reason) = invalid(&secret(
        "amqp://h1.agree.test/a,amqp://h2.agree.test/b",
        "http://h1.agree.test:15672",
    ));
    assert_eq!(key, "uri");
    assert!(
        reason.starts_with("address 2 of 2: names another vhost"),
        "{reason}"
    );
    let (key, reason) = invalid(&secret(
        "amqp://u:pw-alpha@h1.agree.test/,amqp://u:pw-beta@h2.agree.test/",
        "http://h1.agree.test:15672",
    ));
    assert_eq!(key, "uri");
    assert!(reason.contains("other credentials"), "{reason}");
    assert!(
        !reason.contains("alpha") && !reason.contains("beta"),
        "no password shown: {reason}"
    );
    let (key, reason) = invalid(&secret(
        "amqp://h1.agree.test/,ftp://h2.agree.test/",
        "http://h1.agree.test:15672",
    ));
    // `ftp://` is no scheme of the list: the comma stays in the first URI, whose vhost
    // would then hold a second URI.
    assert_eq!(key, "uri");
    assert!(
        reason.contains("the vhost part holds another URI"),
        "{reason}"
    );
    let (key, reason) = invalid(&secret(
        "amqp://h1.agree.test/",
        "http://h1.agree.test:15672,http://h2.agree.test:15672/api",
    ));
    assert_eq!(key, "managementUri");
    assert!(
        reason.starts_with("address 2 of 2: give the management plugin's base URI without /api"),
        "{reason}"
    );
    let many: Vec<String> = (0..=MAX_ADDRESSES)
        .map(|i| format!("amqp://h{i}.agree.test/"))
        .collect();
    let (key, reason) = invalid(&secret(&many.join(","), "http://h1.agree.test:15672"));
    assert_eq!(key, "uri");
    assert!(
        reason.contains(&format!("at most {MAX_ADDRESSES}")),
        "{reason}"
    );
    let (key, reason) = invalid(&secret(" , ", "http://h1.agree.test:15672"));
    assert_eq!((key.as_str(), reason.as_str()), ("uri", "value is empty"));
}

#[test]
fn the_address_in_use_is_tried_first_and_shared_by_every_parse_of_the_list() {
    let data = secret(
        "amqp://x1.order.test/,amqp://x2.order.test/,amqp://x3.order.test/",
        "http://x1.order.test:15672",
    );
    let first = BrokerConnection::from_secret_data("s", &data).expect("valid");
    assert_eq!(first.amqp_addresses().try_order(), [0, 1, 2]);
    assert!(first.amqp_addresses().answered(0).is_none(), "no change");
    let moved_from = first.amqp_addresses().answered(2).map(Url::to_string);
    assert_eq!(moved_from.as_deref(), Some("amqp://x1.order.test/"));
    assert_eq!(first.amqp_addresses().try_order(), [2, 0, 1]);
    assert_eq!(first.redacted_amqp_uri(), "amqp://guest:***@x3.order.test/");
    // The Secret read again (the next reconcile) starts where the last one ended.
    let again = BrokerConnection::from_secret_data("s", &data).expect("valid");
    assert_eq!(again.amqp_addresses().in_use_index(), 2);
    assert_eq!(
        again, first,
        "which address is in use is no part of equality"
    );
    assert!(
        !format!("{again:?}").contains("in_use"),
        "the digest of a router's settings does not change with the address in use"
    );
}

mod redis {
    use super::super::RedisConnection;
    use crate::wire::BrokerError;
    use std::collections::BTreeMap;

    fn read(uri: &str) -> Result<RedisConnection, BrokerError> {
        let data = BTreeMap::from([("uri".to_string(), uri.as_bytes().to_vec())]);
        RedisConnection::from_secret_data("redis", &data)
    }

    fn reason(uri: &str) -> String {
        match read(uri) {
            Err(BrokerError::InvalidSecret { key, reason, .. }) => {
                assert_eq!(key, "uri");
                reason
            }
            other => panic!("{uri}: {other:?}"),
        }
    }

    #[test]
    fn a_redis_uri_list_is_read_and_shown_without_its_password() {
        let c = read("redis://app:s3cret@10.0.0.1:7001/0,redis://app:s3cret@10.0.0.2:7002/0")
            .expect("valid");
        assert_eq!(c.uris_with_credentials().len(), 2);
        assert!(!c.redacted().contains("s3cret"), "{}", c.redacted());
        assert!(!format!("{c:?}").contains("s3cret"));
        assert!(c.redacted().contains("app:***@10.0.0.1:7001"));
    }

    #[test]
    fn a_rabbitmq_uri_or_a_mixed_list_is_refused_with_what_to_do() {
        assert!(reason("amqp://guest:guest@localhost:5672/").contains("spec.broker.type"));
        assert!(reason("http://localhost").contains("not redis:// or rediss://"));
        assert!(reason("rediss://a:6379,redis://b:6379").contains("TLS alike"));
        let amqp = BTreeMap::from([
            ("uri".to_string(), b"redis://localhost:6379".to_vec()),
            (
                "managementUri".to_string(),
                b"http://localhost:15672".to_vec(),
            ),
        ]);
        match super::super::BrokerConnection::from_secret_data("rabbit", &amqp) {
            Err(BrokerError::InvalidSecret { reason, .. }) => {
                assert!(reason.contains("set spec.broker.type: Redis"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            RedisConnection::from_secret_data("redis", &BTreeMap::new()),
            Err(BrokerError::InvalidSecret { .. })
        ));
    }
}
