//! The grammar of filter expressions: `dlq replay --filter`, `dlq purge --filter` and a
//! DeadLetterReplay's `spec.filter` say with it which dead-lettered messages they take.
//! Pure; parsing only (matching a dead letter is [`crate::dlq::filter`]'s, next to the
//! dead-letter record).
//!
//! A filter is one or more terms joined by `,` (and repeated `--filter` flags add terms);
//! a message matches when every term does:
//!
//! | term | matches when |
//! |---|---|
//! | `class=C` / `class!=C` | the error class is / is not `C` (a known class in any case, as name or slug: `timeout`, `Timeout`, `connection-refused`; [`canonical_class`]) |
//! | `reason=R` / `reason!=R` | the reason (`dlq-reason`, else `x-death`) is / is not `R`, in any case (`MaxRetriesExceeded`, `maxretriesexceeded`) |
//! | `queue=Q` / `queue!=Q` | the original queue is / is not `Q` |
//! | `age>D` / `age<D` | dead-lettered more / less than duration `D` ago (`30s`, `7d`; the CRDs' grammar); a message with no dead-lettering time matches neither |
//! | `header.NAME=V` / `header.NAME!=V` | header `NAME`, as text, is / is not `V` |
//! | `id=M` / `id!=M` | the `message_id` property is / is not exactly `M` (case and spaces inside count; a message without one is never `id=`, always `id!=`) |
//!
//! Values are trimmed, and cannot contain `,` (it separates terms): a message id or
//! queue name with a comma can only be selected by building the [`Term`] in code, as
//! `dlq repair` does ([`crate::dlq::repair`]).

use crate::duration::parse_ms;
use crate::error_class::canonical_class;

/// One term of a filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// `class=` / `class!=`: (value, equal).
    Class(String, bool),
    /// `reason=` / `reason!=`.
    Reason(String, bool),
    /// `queue=` / `queue!=`.
    Queue(String, bool),
    /// `age>` (older than, ms).
    OlderThan(u64),
    /// `age<` (younger than, ms).
    YoungerThan(u64),
    /// `header.NAME=` / `header.NAME!=`: (name, value, equal).
    Header(String, String, bool),
    /// `id=` / `id!=`: the AMQP `message_id` property, compared exactly: (value, equal).
    MessageId(String, bool),
}

/// All terms must match; no term matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// The terms.
    pub terms: Vec<Term>,
}

/// A filter expression that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--filter {term:?}: {reason}")]
pub struct FilterError {
    /// The offending term.
    pub term: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Filter {
    /// Parses every expression of `exprs` (each a `,`-separated list of terms).
    ///
    /// # Errors
    /// [`FilterError`] naming the first bad term: an unknown key, a missing operator or
    /// value, an operator the key does not take, or a bad duration.
    pub fn parse<S: AsRef<str>>(exprs: &[S]) -> Result<Filter, FilterError> {
        let mut terms = Vec::new();
        for expr in exprs {
            for raw in expr.as_ref().split(',') {
                terms.push(parse_term(raw.trim())?);
            }
        }
        Ok(Filter { terms })
    }

    /// Adds the term `age>older_than_ms` (dead-lettered more than that long ago).
    pub fn older_than(mut self, older_than_ms: u64) -> Filter {
        self.terms.push(Term::OlderThan(older_than_ms));
        self
    }
}

fn parse_term(raw: &str) -> Result<Term, FilterError> {
    let err = |reason: &str| FilterError {
        term: raw.to_string(),
        reason: reason.to_string(),
    };
    if raw.is_empty() {
        return Err(err(
            "empty term (expected e.g. class=timeout, age>1h, header.tenant=a)",
        ));
    }
    // The operator: the first of `!=`, `=`, `>`, `<`.
    let pos = raw
        .find(['!', '=', '>', '<'])
        .ok_or_else(|| err("no operator (=, !=, > or <)"))?;
    let (key, rest) = raw.split_at(pos);
    let (op, value) = if let Some(v) = rest.strip_prefix("!=") {
        ("!=", v)
    } else {
        rest.split_at(1)
    };
    let key = key.trim();
    let value = value.trim();
    if value.is_empty() {
        return Err(err("no value after the operator"));
    }
    if value.starts_with(['=', '>', '<', '!']) {
        return Err(err("the operators are =, !=, > and < (not ==, >=, <=)"));
    }
    let eq = match op {
        "=" => Some(true),
        "!=" => Some(false),
        _ => None,
    };
    let text = |make: fn(String, bool) -> Term| {
        eq.map(|eq| make(value.to_string(), eq))
            .ok_or_else(|| err(&format!("{key} takes = or !=")))
    };
    match key {
        "class" => text(|v, eq| Term::Class(canonical_class(&v), eq)),
        "reason" => text(Term::Reason),
        "queue" => text(Term::Queue),
        "id" => text(Term::MessageId),
        "age" => {
            let ms = parse_ms(value).map_err(|e| err(&format!("age: {e}")))?;
            match op {
                ">" => Ok(Term::OlderThan(ms)),
                "<" => Ok(Term::YoungerThan(ms)),
                _ => Err(err("age takes > or < (age>7d: older than 7 days)")),
            }
        }
        _ => match key.strip_prefix("header.") {
            Some(name) if !name.is_empty() => eq
                .map(|eq| Term::Header(name.to_string(), value.to_string(), eq))
                .ok_or_else(|| err("header.NAME takes = or !=")),
            _ => Err(err(&format!(
                "unknown key {key:?} (class, reason, queue, age, header.NAME, id)"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_parse_to_their_kind() {
        let f = Filter::parse(&["class=timeout,age>1h", "header.tenant=a"]).expect("parse");
        assert_eq!(
            f.terms,
            [
                Term::Class("Timeout".into(), true),
                Term::OlderThan(3_600_000),
                Term::Header("tenant".into(), "a".into(), true),
            ]
        );
        let f = Filter::parse(&["reason!=rejected", " queue = q ", "age<1m", "class!=x"])
            .expect("parse");
        assert_eq!(
            f.terms,
            [
                Term::Reason("rejected".into(), false),
                Term::Queue("q".into(), true),
                Term::YoungerThan(60_000),
                Term::Class("x".into(), false),
            ]
        );
        assert_eq!(Filter::default().older_than(5).terms, [Term::OlderThan(5)]);
        let f = Filter::parse(&["id=order-1 ", "id!=Order-1"]).expect("parse");
        assert_eq!(
            f.terms,
            [
                Term::MessageId("order-1".into(), true),
                Term::MessageId("Order-1".into(), false),
            ]
        );
    }

    #[test]
    fn bad_terms_are_named() {
        for (expr, reason) in [
            ("", "empty term"),
            ("class", "no operator"),
            ("class=", "no value"),
            ("class>x", "class takes = or !="),
            ("age=1h", "age takes > or <"),
            ("age>soon", "age:"),
            ("colour=red", "unknown key \"colour\""),
            ("header.=x", "unknown key"),
            ("class=a,,reason=b", "empty term"),
            ("class==x", "not ==, >=, <="),
            ("age>=1h", "not ==, >=, <="),
            ("id>x", "id takes = or !="),
            ("id=", "no value"),
        ] {
            let e = Filter::parse(&[expr]).expect_err(expr);
            assert!(e.to_string().contains(reason), "{expr}: {e}");
            assert!(e.to_string().starts_with("--filter"), "{e}");
        }
    }
}
