//! Where a replayed copy will go, found out before it is published: a copy goes out only
//! when the broker would route it to the DeadLetterQueue's source queue and to no other
//! queue. `mandatory` cannot tell that (the broker returns a message only when it reaches
//! no queue at all), so the route is resolved from the broker's own routing state.
//!
//! The routing keys of a publish are its routing key plus the `CC` and `BCC` headers'
//! strings, which the copy keeps (RabbitMQ docs, "Sender-selected Distribution": arrays of
//! longstr, added to the routing key). The destinations of each key are read from the
//! exchange's type and bindings ([`DeadLetterOps::exchange_route`]; on RabbitMQ
//! `GET /api/exchanges/{vhost}/{name}` and `…/bindings/source` of the management API)
//! with the rules of the built-in exchange types (RabbitMQ docs, "Exchanges"; AMQP 0-9-1
//! spec §3.1.3):
//! - the default exchange (`""`): the queue named by the key;
//! - `direct`: bindings whose key equals the routing key;
//! - `fanout`: every binding;
//! - `topic`: bindings whose pattern matches ([`topic_matches`]).
//!
//! What cannot be resolved for certain is refused, never guessed: a `headers` exchange
//! (matching on argument tables), any other type (plugins: consistent hash, delayed
//! message, …), a matching binding to another exchange (exchange-to-exchange routing), a
//! `CC`/`BCC` header that is not an array. An alternate exchange does not matter: the
//! broker uses it only when the exchange routes the message to no queue (RabbitMQ docs,
//! "Alternate Exchanges"), and a copy goes out only when it reaches the source queue.
//!
//! The result is cached per (exchange, routing key) for one replay: bindings changed
//! during a replay are not seen by it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::DeadLetterOps;
use crate::printable::{shown, PREVIEW_BYTES};
use crate::wire::message::{HeaderValue, Headers};
use crate::wire::BrokerError;

/// A binding of an exchange as a source (on RabbitMQ, as
/// `GET /api/exchanges/{vhost}/{name}/bindings/source` lists it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Binding {
    /// The queue or exchange bound.
    pub destination: String,
    /// `queue` or `exchange`.
    pub destination_type: String,
    /// The binding key (a pattern for a topic exchange).
    #[serde(default)]
    pub routing_key: String,
}

/// An exchange's type and its bindings as a source: what [`destinations`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeRoute {
    /// `direct`, `fanout`, `topic`, `headers`, or a plugin's type.
    pub kind: String,
    /// Its bindings as a source.
    pub bindings: Vec<Binding>,
}

/// Whether a topic exchange's binding key `pattern` matches `routing_key`: both split into
/// words at `.` (an empty key has no word), a `*` word matches exactly one word (which may
/// be empty), a `#` word zero or more words, any other word itself (RabbitMQ docs,
/// tutorial 5 "Topics"; `rabbit_exchange_type_topic`, whose splitting this follows).
pub fn topic_matches(pattern: &str, routing_key: &str) -> bool {
    fn words(s: &str) -> Vec<&str> {
        if s.is_empty() {
            Vec::new()
        } else {
            s.split('.').collect()
        }
    }
    fn matches(p: &[&str], k: &[&str]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((&"#", rest)) => (0..=k.len()).any(|skip| matches(rest, &k[skip..])),
            Some((&w, rest)) => match k.split_first() {
                Some((&first, k_rest)) => (w == "*" || w == first) && matches(rest, k_rest),
                None => false,
            },
        }
    }
    matches(&words(pattern), &words(routing_key))
}

/// The queues that exchange type `kind` with `bindings` routes `routing_key` to, or why
/// that cannot be told for certain (module doc).
///
/// # Errors
/// A `headers` or unknown exchange type; a matching binding to another exchange.
pub fn destinations(
    kind: &str,
    bindings: &[Binding],
    routing_key: &str,
) -> Result<BTreeSet<String>, String> {
    let matching: Vec<&Binding> =
        match kind {
            "direct" => bindings
                .iter()
                .filter(|b| b.routing_key == routing_key)
                .collect(),
            "fanout" => bindings.iter().collect(),
            "topic" => bindings
                .iter()
                .filter(|b| topic_matches(&b.routing_key, routing_key))
                .collect(),
            "headers" => return Err(
                "a headers exchange: where it routes depends on header matching, not resolved here"
                    .into(),
            ),
            other => {
                return Err(format!(
                    "an exchange of type {}: its routing is not known here",
                    shown(other, PREVIEW_BYTES)
                ))
            }
        };
    let mut queues = BTreeSet::new();
    for b in matching {
        if b.destination_type != "queue" {
            return Err(format!(
                "it routes on to exchange \"{}\": exchange-to-exchange bindings are not followed",
                shown(&b.destination, PREVIEW_BYTES)
            ));
        }
        queues.insert(b.destination.clone());
    }
    Ok(queues)
}

/// The routing keys of a publish with `routing_key` and `headers`: the key, then the
/// strings of the `CC` and `BCC` headers (RabbitMQ docs, "Sender-selected Distribution";
/// elements that are not long strings are ignored, as the broker ignores them).
///
/// # Errors
/// A `CC` or `BCC` header that is not an array.
pub fn routing_keys(routing_key: &str, headers: Option<&Headers>) -> Result<Vec<String>, String> {
    let mut keys = vec![routing_key.to_string()];
    for name in ["CC", "BCC"] {
        match headers.and_then(|h| h.get(name)) {
            None => {}
            Some(HeaderValue::Array(a)) => keys.extend(a.iter().filter_map(|v| match v {
                HeaderValue::LongString(s) => Some(String::from_utf8_lossy(s).into_owned()),
                _ => None,
            })),
            Some(_) => return Err(format!("its {name} header is not an array of routing keys")),
        }
    }
    Ok(keys)
}

/// `Ok` when `queues` is exactly `{source}`; otherwise why a copy must not go.
///
/// # Errors
/// No queue at all, or another queue besides (or instead of) `source`, named.
pub fn only_source(queues: &BTreeSet<String>, source: &str) -> Result<(), String> {
    let others: Vec<String> = queues
        .iter()
        .filter(|q| q.as_str() != source)
        .map(|q| format!("\"{}\"", shown(q, PREVIEW_BYTES)))
        .collect();
    if !others.is_empty() {
        let shown_others = if others.len() > 3 {
            format!("{} and {} more", others[..3].join(", "), others.len() - 3)
        } else {
            others.join(", ")
        };
        return Err(format!(
            "its route also reaches {} besides the source queue: never sent to another queue",
            shown_others
        ));
    }
    if queues.is_empty() {
        return Err("its route reaches no queue".into());
    }
    Ok(())
}

/// Routes resolved during one replay, per (exchange, routing key), and the exchanges read.
#[derive(Debug, Default)]
pub struct Routes {
    /// Exchange name → its type and bindings (`Err`: why it cannot be used, e.g. it does
    /// not exist).
    exchanges: BTreeMap<String, Result<ExchangeRoute, String>>,
    /// (exchange, routing key) → the queues it reaches, or why that is not known.
    routes: BTreeMap<(String, String), Result<BTreeSet<String>, String>>,
}

impl Routes {
    /// Whether a copy published to `exchange` with `routing_key` and `headers` (the copy's)
    /// reaches the queue `source` of `vhost` and no other: `Ok(Ok(()))` to publish,
    /// `Ok(Err(why))` to skip it (module doc). Reads the exchange through `broker` once per
    /// replay.
    ///
    /// # Errors
    /// The broker's transport, authentication or API errors (a missing exchange is a
    /// skip).
    pub async fn check(
        &mut self,
        broker: &dyn DeadLetterOps,
        vhost: &str,
        (exchange, routing_key): (&str, &str),
        headers: Option<&Headers>,
        source: &str,
    ) -> Result<Result<(), String>, BrokerError> {
        let keys = match routing_keys(routing_key, headers) {
            Ok(k) => k,
            Err(why) => return Ok(Err(why)),
        };
        let mut all = BTreeSet::new();
        for key in keys {
            match self.destinations_of(broker, vhost, exchange, &key).await? {
                Ok(queues) => all.extend(queues),
                Err(why) => return Ok(Err(why)),
            }
        }
        Ok(only_source(&all, source))
    }

    /// The queues `exchange` routes `key` to (cached), or why that is not known.
    async fn destinations_of(
        &mut self,
        broker: &dyn DeadLetterOps,
        vhost: &str,
        exchange: &str,
        key: &str,
    ) -> Result<Result<BTreeSet<String>, String>, BrokerError> {
        let id = (exchange.to_string(), key.to_string());
        if let Some(known) = self.routes.get(&id) {
            return Ok(known.clone());
        }
        let resolved = if exchange.is_empty() {
            // The default exchange: the queue named by the key.
            Ok(BTreeSet::from([key.to_string()]))
        } else {
            match self.exchange(broker, vhost, exchange).await? {
                Ok(x) => destinations(&x.kind, &x.bindings, key),
                Err(why) => Err(why),
            }
        };
        self.routes.insert(id, resolved.clone());
        Ok(resolved)
    }

    /// Exchange `name` of `vhost` and its bindings (cached), or why it cannot be used.
    async fn exchange(
        &mut self,
        broker: &dyn DeadLetterOps,
        vhost: &str,
        name: &str,
    ) -> Result<Result<ExchangeRoute, String>, BrokerError> {
        if let Some(known) = self.exchanges.get(name) {
            return Ok(known.clone());
        }
        let read = broker
            .exchange_route(vhost, name)
            .await?
            .ok_or_else(|| format!("exchange \"{}\" does not exist", shown(name, PREVIEW_BYTES)));
        self.exchanges.insert(name.to_string(), read.clone());
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(queue: &str, key: &str) -> Binding {
        Binding {
            destination: queue.into(),
            destination_type: "queue".into(),
            routing_key: key.into(),
        }
    }

    #[test]
    fn topic_patterns_match_like_the_broker() {
        for (pattern, key, expected) in [
            ("orders.*", "orders.created", true),
            ("orders.*", "orders", false),
            ("orders.*", "orders.created.eu", false),
            ("orders.#", "orders", true),
            ("orders.#", "orders.created.eu", true),
            ("#", "", true),
            ("#", "a.b.c", true),
            ("*", "", false),
            ("*", "a", true),
            ("", "", true),
            ("", "a", false),
            ("*.created", "orders.created", true),
            ("#.eu", "orders.created.eu", true),
            ("#.eu", "eu", true),
            ("a.#.b", "a.b", true),
            ("a.#.b", "a.x.y.b", true),
            ("a.#.b", "a.x.y", false),
            ("a.*.b", "a..b", true),
            ("a*", "ab", false),
            ("#.#", "x", true),
        ] {
            assert_eq!(
                topic_matches(pattern, key),
                expected,
                "{pattern:?} ~ {key:?}"
            );
        }
    }

    #[test]
    fn destinations_follow_each_type_and_refuse_what_they_cannot_resolve() {
        let b = [to("q", "k"), to("other", "x"), to("all", "#")];
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(destinations("direct", &b, "k"), Ok(set(&["q"])));
        assert_eq!(destinations("direct", &b, "none"), Ok(set(&[])));
        assert_eq!(
            destinations("fanout", &b, "k"),
            Ok(set(&["q", "other", "all"]))
        );
        assert_eq!(destinations("topic", &b, "k"), Ok(set(&["q", "all"])));
        assert!(destinations("headers", &b, "k").is_err());
        assert!(destinations("x-consistent-hash", &b, "k").is_err());
        let e2e = [
            to("q", "k"),
            Binding {
                destination: "next".into(),
                destination_type: "exchange".into(),
                routing_key: "k".into(),
            },
        ];
        assert!(destinations("direct", &e2e, "k")
            .expect_err("e2e")
            .contains("\"next\""));
        // A non-matching binding to an exchange does not matter.
        assert_eq!(destinations("direct", &e2e, "z"), Ok(set(&[])));
    }

    #[test]
    fn only_the_source_queue_passes() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(only_source(&set(&["q"]), "q"), Ok(()));
        assert!(only_source(&set(&[]), "q")
            .expect_err("none")
            .contains("no queue"));
        let why = only_source(&set(&["q", "b\u{1b}[2J"]), "q").expect_err("other");
        assert!(why.contains("\"b\\u{1b}[2J\""), "{why}");
        assert!(only_source(&set(&["x"]), "q").is_err());
    }

    #[test]
    fn cc_and_bcc_add_routing_keys() {
        let mut h = Headers::new();
        assert_eq!(routing_keys("k", Some(&h)), Ok(vec!["k".to_string()]));
        h.insert(
            "CC".into(),
            HeaderValue::Array(vec![HeaderValue::text("c1"), HeaderValue::I64(3)]),
        );
        h.insert(
            "BCC".into(),
            HeaderValue::Array(vec![HeaderValue::text("b1")]),
        );
        assert_eq!(
            routing_keys("k", Some(&h)),
            Ok(vec!["k".to_string(), "c1".to_string(), "b1".to_string()])
        );
        h.insert("CC".into(), HeaderValue::text("c1"));
        assert!(routing_keys("k", Some(&h)).is_err());
        assert_eq!(routing_keys("k", None), Ok(vec!["k".to_string()]));
    }
}
