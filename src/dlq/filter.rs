//! Matching `--filter` expressions against dead letters: which dead-lettered messages
//! `dlq replay`, `dlq purge` and a DeadLetterReplay take. The grammar, [`Filter`] and its
//! [`Term`]s are [`crate::filter`]'s, re-exported here.

use super::DeadLetter;
pub use crate::filter::{Filter, FilterError, Term};

impl Filter {
    /// Whether `m`, read at `now_ms` (ms since epoch), matches every term.
    pub fn matches(&self, m: &DeadLetter, now_ms: u64) -> bool {
        self.terms.iter().all(|t| term_matches(t, m, now_ms))
    }
}

fn term_matches(t: &Term, m: &DeadLetter, now_ms: u64) -> bool {
    let age = m.dead_lettered_at_ms.map(|at| now_ms.saturating_sub(at));
    match t {
        Term::Class(v, eq) => (&m.error_class == v) == *eq,
        Term::Reason(v, eq) => m.reason.eq_ignore_ascii_case(v) == *eq,
        Term::Queue(v, eq) => (&m.original_queue == v) == *eq,
        Term::OlderThan(ms) => age.is_some_and(|a| a > *ms),
        Term::YoungerThan(ms) => age.is_some_and(|a| a < *ms),
        Term::MessageId(v, eq) => (m.message_id.as_deref() == Some(v.as_str())) == *eq,
        Term::Header(name, v, eq) => {
            let text = m.headers.get(name).map(|h| match h {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            (text.as_deref() == Some(v.as_str())) == *eq
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn letter(class: &str, reason: &str, at: Option<u64>) -> DeadLetter {
        DeadLetter {
            queue: "q.dlq".into(),
            message_id: None,
            error_class: crate::dlq::canonical_class(class),
            reason: reason.into(),
            retry_count: 0,
            original_queue: "q".into(),
            original_exchange: None,
            original_routing_key: None,
            replay_count: 0,
            dead_lettered_at_ms: at,
            delivery_count: 0,
            last_error: None,
            headers: BTreeMap::from([
                ("tenant".to_string(), serde_json::json!("a")),
                ("n".to_string(), serde_json::json!(7)),
            ]),
            body_bytes: 0,
            body_preview: String::new(),
            body_truncated: false,
        }
    }

    #[test]
    fn terms_parse_and_match() {
        let f = Filter::parse(&["class=timeout,age>1h", "header.tenant=a"]).expect("parse");
        assert_eq!(f.terms.len(), 3);
        let now = 10 * 3_600_000;
        assert!(f.matches(&letter("timeout", "x", Some(0)), now));
        assert!(
            !f.matches(&letter("timeout", "x", Some(now - 60_000)), now),
            "too young"
        );
        assert!(!f.matches(&letter("parse", "x", Some(0)), now));
        assert!(
            !f.matches(&letter("timeout", "x", None), now),
            "no time: no age match"
        );
        let f =
            Filter::parse(&["reason!=rejected", "header.n=7", "queue=q", "age<1m"]).expect("parse");
        assert!(f.matches(&letter("c", "MaxRetriesExceeded", Some(now)), now));
        assert!(!f.matches(&letter("c", "rejected", Some(now)), now));
        assert!(
            !f.matches(&letter("c", "Rejected", Some(now)), now),
            "a reason in any case"
        );
        let any_case = Filter::parse(&["reason=maxretriesexceeded"]).expect("parse");
        assert!(any_case.matches(&letter("c", "MaxRetriesExceeded", None), now));
        assert!(!any_case.matches(&letter("c", "rejected", None), now));
        assert!(
            Filter::default().matches(&letter("c", "r", None), 0),
            "no term: all"
        );
        assert!(!Filter::parse(&["header.missing=x"])
            .expect("parse")
            .matches(&letter("c", "r", None), 0));
        assert!(Filter::parse(&["header.missing!=x"])
            .expect("parse")
            .matches(&letter("c", "r", None), 0));
    }

    #[test]
    fn id_matches_the_message_id_exactly() {
        let mut m = letter("c", "r", None);
        m.message_id = Some("order-1".into());
        let id = |expr: &str| Filter::parse(&[expr]).expect("parse");
        assert!(id("id=order-1").matches(&m, 0));
        assert!(!id("id=Order-1").matches(&m, 0), "case counts");
        assert!(!id("id=order-10").matches(&m, 0), "no prefix match");
        assert!(!id("id!=order-1").matches(&m, 0));
        assert!(id("id!=order-2").matches(&m, 0));
        m.message_id = None;
        assert!(!id("id=order-1").matches(&m, 0), "no id: never equal");
        assert!(id("id!=order-1").matches(&m, 0), "no id: always different");
        // Built in code, a value may hold what the grammar cannot: a comma.
        m.message_id = Some("a,b".into());
        let f = Filter {
            terms: vec![Term::MessageId("a,b".into(), true)],
        };
        assert!(f.matches(&m, 0));
    }
}
