//! A message as the broker-neutral code sees it: properties, headers and body.
//!
//! The header model is the richest one the operator meets, the field table of AMQP 0-9-1
//! (AMQP 0-9-1 spec §4.2.5.5, with RabbitMQ's byte array): each adapter converts its own
//! types into it in one place (RabbitMQ: `rabbitmq::dead_letters::convert`), and a value
//! converted there and back is the same value, so a copy built from these types (a
//! replayed message) carries exactly the original's properties.

use std::collections::BTreeMap;

/// Header name → value.
pub type Headers = BTreeMap<String, HeaderValue>;

/// One header value. Integer widths and string kinds are kept apart so that a value read
/// from a message is written back unchanged.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderValue {
    /// A boolean.
    Bool(bool),
    /// A signed 8-bit integer.
    I8(i8),
    /// An unsigned 8-bit integer.
    U8(u8),
    /// A signed 16-bit integer.
    I16(i16),
    /// An unsigned 16-bit integer.
    U16(u16),
    /// A signed 32-bit integer.
    I32(i32),
    /// An unsigned 32-bit integer.
    U32(u32),
    /// A signed 64-bit integer.
    I64(i64),
    /// A 32-bit float.
    F32(f32),
    /// A 64-bit float.
    F64(f64),
    /// A decimal: `value` × 10^-`scale`.
    Decimal {
        /// Digits after the point.
        scale: u8,
        /// The unscaled value.
        value: u32,
    },
    /// A short string (at most 255 bytes on AMQP 0-9-1).
    ShortString(String),
    /// A long string: bytes, usually UTF-8 text.
    LongString(Vec<u8>),
    /// An array of values.
    Array(Vec<HeaderValue>),
    /// A timestamp, seconds since the epoch.
    Timestamp(u64),
    /// A nested table.
    Table(Headers),
    /// Raw bytes (RabbitMQ's byte array).
    ByteArray(Vec<u8>),
    /// No value.
    Void,
}

impl HeaderValue {
    /// A long string holding `text`.
    pub fn text(text: &str) -> Self {
        HeaderValue::LongString(text.as_bytes().to_vec())
    }

    /// The value as text, for string values (a long string's bytes read as UTF-8, lossy);
    /// `None` for any other value.
    pub fn as_text(&self) -> Option<String> {
        match self {
            HeaderValue::LongString(s) => Some(String::from_utf8_lossy(s).into_owned()),
            HeaderValue::ShortString(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// The value as a non-negative integer: an integer or timestamp that is not negative,
    /// or a string holding one (surrounding spaces allowed); `None` otherwise.
    pub fn as_u64(&self) -> Option<u64> {
        let signed = |n: i64| u64::try_from(n).ok();
        match self {
            HeaderValue::I8(n) => signed(i64::from(*n)),
            HeaderValue::U8(n) => Some(u64::from(*n)),
            HeaderValue::I16(n) => signed(i64::from(*n)),
            HeaderValue::U16(n) => Some(u64::from(*n)),
            HeaderValue::I32(n) => signed(i64::from(*n)),
            HeaderValue::U32(n) => Some(u64::from(*n)),
            HeaderValue::I64(n) => signed(*n),
            HeaderValue::Timestamp(n) => Some(*n),
            HeaderValue::LongString(s) => std::str::from_utf8(s).ok()?.trim().parse().ok(),
            HeaderValue::ShortString(s) => s.trim().parse().ok(),
            HeaderValue::Bool(_)
            | HeaderValue::F32(_)
            | HeaderValue::F64(_)
            | HeaderValue::Decimal { .. }
            | HeaderValue::Array(_)
            | HeaderValue::Table(_)
            | HeaderValue::ByteArray(_)
            | HeaderValue::Void => None,
        }
    }
}

/// The properties of a message (AMQP 0-9-1 basic properties; every one optional).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Properties {
    /// MIME content type.
    pub content_type: Option<String>,
    /// MIME content encoding.
    pub content_encoding: Option<String>,
    /// Headers (`None`: the message has no header table; `Some` of an empty map: an
    /// empty one).
    pub headers: Option<Headers>,
    /// 1 transient, 2 persistent.
    pub delivery_mode: Option<u8>,
    /// Priority, 0 to 9.
    pub priority: Option<u8>,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Reply-to queue.
    pub reply_to: Option<String>,
    /// Per-message TTL, ms, as text.
    pub expiration: Option<String>,
    /// Message id.
    pub message_id: Option<String>,
    /// Timestamp, seconds since the epoch.
    pub timestamp: Option<u64>,
    /// Message type name (`type`).
    pub kind: Option<String>,
    /// The publishing user.
    pub user_id: Option<String>,
    /// The publishing application.
    pub app_id: Option<String>,
    /// Cluster id (deprecated in AMQP 0-9-1).
    pub cluster_id: Option<String>,
}

impl Properties {
    /// The header `name`, if the message has it.
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.headers.as_ref().and_then(|h| h.get(name))
    }
}

impl From<&Properties> for Properties {
    fn from(p: &Properties) -> Self {
        p.clone()
    }
}

/// A message: properties and body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// Its properties.
    pub properties: Properties,
    /// Its body.
    pub body: Vec<u8>,
}

impl Message {
    /// A message with `body` and the headers `headers` (no other property).
    pub fn new(headers: Headers, body: &[u8]) -> Self {
        Message {
            properties: Properties {
                headers: Some(headers),
                ..Properties::default()
            },
            body: body.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_numeric_strings_read_as_counts_and_negatives_do_not() {
        assert_eq!(HeaderValue::I64(5).as_u64(), Some(5));
        assert_eq!(HeaderValue::I8(-1).as_u64(), None);
        assert_eq!(HeaderValue::text(" 7 ").as_u64(), Some(7));
        assert_eq!(HeaderValue::ShortString("x".into()).as_u64(), None);
        assert_eq!(HeaderValue::Timestamp(9).as_u64(), Some(9));
        assert_eq!(HeaderValue::F64(1.0).as_u64(), None);
        assert_eq!(HeaderValue::text("a").as_text().as_deref(), Some("a"));
        assert_eq!(HeaderValue::I32(1).as_text(), None);
    }
}
