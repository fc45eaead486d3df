//! What a repair changes in the copy of a message ([`Rewrite`]): a new body, headers set
//! and headers removed, each checked (no protected header: [`protected`]; the rules are
//! [`super::repair`]'s module doc). A replay carries it in
//! [`ReplayOptions::rewrite`](super::replay::ReplayOptions::rewrite).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::printable::{shown, PREVIEW_BYTES};
use crate::wire::message::{HeaderValue, Headers};

/// The longest header name AMQP 0-9-1 takes (a short string), bytes.
pub const MAX_HEADER_NAME_BYTES: usize = 255;

/// What a repair changes in the copy of a message: an optional new body, headers set and
/// headers removed. Built only through its checked methods, so it never touches a
/// [`protected`] header.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rewrite {
    body: Option<Vec<u8>>,
    set: Headers,
    remove: BTreeSet<String>,
}

/// Why a [`Rewrite`] cannot be built. Names quoted with `{:?}` (escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    /// A text that should be JSON is not (serde_json's position: line and column from 1).
    #[error("invalid JSON at line {line}, column {column}: {reason}")]
    InvalidJson {
        /// Line, from 1.
        line: usize,
        /// Column (a byte offset in the line), from 1.
        column: usize,
        /// serde_json's reason.
        reason: String,
    },
    /// The header edits are not a JSON object.
    #[error("the headers must be a JSON object of name: value, not {0}")]
    NotAnObject(&'static str),
    /// A protected header ([`protected`]).
    #[error("header {0:?} is protected ({1}): it cannot be set or removed")]
    Protected(String, &'static str),
    /// An empty or too long header name.
    #[error("header name {0:?}: {1}")]
    BadName(String, &'static str),
    /// A header value that is not a string, number or boolean.
    #[error("header {0:?}: {1}")]
    BadValue(String, String),
    /// The same header both set and removed.
    #[error("header {0:?} is both set and removed")]
    SetAndRemoved(String),
}

/// Why `name` is protected, or `None` when a repair may edit it (module doc). Compared in
/// any case.
pub fn protected(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("x-") {
        Some("x-* headers are the broker's")
    } else if lower.starts_with("dlq-") {
        Some("dlq-* headers are the dead-letter contract the retries and replays maintain")
    } else if lower == "cc" || lower == "bcc" {
        Some("CC and BCC add routing keys; the copy's route is checked without edits")
    } else {
        None
    }
}

/// Checks that `text` is one JSON value.
///
/// # Errors
/// [`RewriteError::InvalidJson`] with serde_json's line and column (both from 1) and
/// reason.
pub fn check_json(text: &str) -> Result<Value, RewriteError> {
    serde_json::from_str::<Value>(text).map_err(|e| RewriteError::InvalidJson {
        line: e.line(),
        // serde_json says column 0 at the very start of a line (an end of input there).
        column: e.column().max(1),
        reason: strip_position(&e.to_string()),
    })
}

/// serde_json's message without its trailing " at line L column C" (reported apart).
fn strip_position(message: &str) -> String {
    message
        .rfind(" at line ")
        .map_or(message, |i| &message[..i])
        .to_string()
}

impl Rewrite {
    /// A rewrite that changes nothing (yet).
    pub fn new() -> Self {
        Rewrite::default()
    }

    /// Replaces the body with `body` (any bytes; unchecked).
    pub fn with_body(mut self, body: Vec<u8>) -> Self {
        self.body = Some(body);
        self
    }

    /// Replaces the body with the JSON text `text`, kept byte for byte once it parses.
    ///
    /// # Errors
    /// [`RewriteError::InvalidJson`] ([`check_json`]).
    pub fn with_json_body(self, text: &str) -> Result<Self, RewriteError> {
        check_json(text)?;
        Ok(self.with_body(text.as_bytes().to_vec()))
    }

    /// Sets header `name` to `value`: a string (AMQP long string), an integer (signed
    /// 64-bit), another number (64-bit float) or a boolean.
    ///
    /// # Errors
    /// [`RewriteError::Protected`], [`RewriteError::BadName`] (empty, over
    /// [`MAX_HEADER_NAME_BYTES`]), [`RewriteError::BadValue`] (null, array, object, an
    /// integer beyond `i64`), [`RewriteError::SetAndRemoved`].
    pub fn set_header(&mut self, name: &str, value: &Value) -> Result<(), RewriteError> {
        check_name(name)?;
        if self.remove.contains(name) {
            return Err(RewriteError::SetAndRemoved(name.to_string()));
        }
        self.set
            .insert(name.to_string(), header_value(name, value)?);
        Ok(())
    }

    /// Sets every header of the JSON object `text` ([`Rewrite::set_header`]).
    ///
    /// # Errors
    /// [`RewriteError::InvalidJson`], [`RewriteError::NotAnObject`], and those of
    /// [`Rewrite::set_header`].
    pub fn set_headers_json(&mut self, text: &str) -> Result<(), RewriteError> {
        for (name, value) in &object(check_json(text)?)? {
            self.set_header(name, value)?;
        }
        Ok(())
    }

    /// The header edits that turn `original` (a dead letter's headers as JSON,
    /// [`DeadLetter::headers`](super::DeadLetter::headers)) into the JSON object `edited`:
    /// a header whose value changed or that is new is set ([`Rewrite::set_header`]), one
    /// missing from `edited` is removed; an unchanged one is left alone, so it keeps its
    /// exact AMQP type. For an edit form showing the headers as JSON.
    ///
    /// # Errors
    /// [`RewriteError::InvalidJson`], [`RewriteError::NotAnObject`];
    /// [`RewriteError::Protected`] when a protected header was changed, added or removed
    /// (left as it was, it is fine); those of [`Rewrite::set_header`].
    pub fn edit_headers_json(
        &mut self,
        original: &BTreeMap<String, Value>,
        edited: &str,
    ) -> Result<(), RewriteError> {
        let edited = object(check_json(edited)?)?;
        for (name, value) in &edited {
            if original.get(name) != Some(value) {
                self.set_header(name, value)?;
            }
        }
        for name in original.keys() {
            if !edited.contains_key(name) {
                self.remove_header(name)?;
            }
        }
        Ok(())
    }

    /// Removes header `name` from the copy (nothing happens when the message has none).
    ///
    /// # Errors
    /// [`RewriteError::Protected`], [`RewriteError::BadName`],
    /// [`RewriteError::SetAndRemoved`].
    pub fn remove_header(&mut self, name: &str) -> Result<(), RewriteError> {
        check_name(name)?;
        if self.set.contains_key(name) {
            return Err(RewriteError::SetAndRemoved(name.to_string()));
        }
        self.remove.insert(name.to_string());
        Ok(())
    }

    /// The new body, if any.
    pub fn body(&self) -> Option<&[u8]> {
        self.body.as_deref()
    }

    /// The headers set, by name.
    pub fn set(&self) -> &Headers {
        &self.set
    }

    /// The names of the headers removed.
    pub fn removed(&self) -> &BTreeSet<String> {
        &self.remove
    }

    /// Whether it changes neither body nor header.
    pub fn is_empty(&self) -> bool {
        self.body.is_none() && self.set.is_empty() && self.remove.is_empty()
    }

    /// Applies the header edits to `headers`: removals, then the values set.
    pub fn apply(&self, headers: &mut Headers) {
        for name in &self.remove {
            headers.remove(name);
        }
        for (name, value) in &self.set {
            headers.insert(name.clone(), value.clone());
        }
    }
}

/// The JSON object `value`.
///
/// # Errors
/// [`RewriteError::NotAnObject`] naming what it is instead.
fn object(value: Value) -> Result<serde_json::Map<String, Value>, RewriteError> {
    Err(RewriteError::NotAnObject(match value {
        Value::Object(map) => return Ok(map),
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    }))
}

/// Refuses a protected, empty or over-long header name.
fn check_name(name: &str) -> Result<(), RewriteError> {
    if let Some(why) = protected(name) {
        return Err(RewriteError::Protected(name.to_string(), why));
    }
    if name.is_empty() {
        return Err(RewriteError::BadName(name.to_string(), "empty"));
    }
    if name.len() > MAX_HEADER_NAME_BYTES {
        return Err(RewriteError::BadName(
            shown(name, PREVIEW_BYTES),
            "longer than 255 bytes (AMQP 0-9-1)",
        ));
    }
    Ok(())
}

/// `value` as a header value (see [`Rewrite::set_header`]).
fn header_value(name: &str, value: &Value) -> Result<HeaderValue, RewriteError> {
    let bad = |why: &str| Err(RewriteError::BadValue(name.to_string(), why.to_string()));
    match value {
        Value::String(s) => Ok(HeaderValue::text(s)),
        Value::Bool(b) => Ok(HeaderValue::Bool(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(HeaderValue::I64(i))
            } else if n.is_u64() {
                bad("an integer beyond the signed 64-bit range")
            } else if n
                .as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() >= 9.2e18)
            {
                // serde_json reads an integer past u64 as a float: it would be stored
                // rounded, as a float.
                bad("an integer beyond the signed 64-bit range")
            } else {
                n.as_f64()
                    .map_or_else(|| bad("not a finite number"), |f| Ok(HeaderValue::F64(f)))
            }
        }
        Value::Null => bad("null is not a header value (remove the header instead)"),
        Value::Array(_) | Value::Object(_) => bad("must be a string, number or boolean"),
    }
}
