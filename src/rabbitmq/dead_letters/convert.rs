//! `lapin`'s message properties and header tables ↔ the broker-neutral ones of
//! [`crate::broker::message`], in one place. A value converted to the neutral type and
//! back is the same value (each AMQP field type has its own neutral variant).

use lapin::types::{
    AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable, LongString, ShortString,
};
use lapin::BasicProperties;

use crate::broker::message::{HeaderValue, Headers, Properties};

impl From<&AMQPValue> for HeaderValue {
    fn from(v: &AMQPValue) -> Self {
        match v {
            AMQPValue::Boolean(b) => HeaderValue::Bool(*b),
            AMQPValue::ShortShortInt(n) => HeaderValue::I8(*n),
            AMQPValue::ShortShortUInt(n) => HeaderValue::U8(*n),
            AMQPValue::ShortInt(n) => HeaderValue::I16(*n),
            AMQPValue::ShortUInt(n) => HeaderValue::U16(*n),
            AMQPValue::LongInt(n) => HeaderValue::I32(*n),
            AMQPValue::LongUInt(n) => HeaderValue::U32(*n),
            AMQPValue::LongLongInt(n) => HeaderValue::I64(*n),
            AMQPValue::Float(f) => HeaderValue::F32(*f),
            AMQPValue::Double(f) => HeaderValue::F64(*f),
            AMQPValue::DecimalValue(d) => HeaderValue::Decimal {
                scale: d.scale,
                value: d.value,
            },
            AMQPValue::ShortString(s) => HeaderValue::ShortString(s.to_string()),
            AMQPValue::LongString(s) => HeaderValue::LongString(s.as_bytes().to_vec()),
            AMQPValue::FieldArray(a) => {
                HeaderValue::Array(a.as_slice().iter().map(HeaderValue::from).collect())
            }
            AMQPValue::Timestamp(t) => HeaderValue::Timestamp(*t),
            AMQPValue::FieldTable(t) => HeaderValue::Table(headers_of(t)),
            AMQPValue::ByteArray(b) => HeaderValue::ByteArray(b.as_slice().to_vec()),
            AMQPValue::Void => HeaderValue::Void,
        }
    }
}

/// A header table as neutral headers.
pub fn headers_of(table: &FieldTable) -> Headers {
    table
        .inner()
        .iter()
        .map(|(k, v)| (k.to_string(), HeaderValue::from(v)))
        .collect()
}

impl From<&BasicProperties> for Properties {
    fn from(p: &BasicProperties) -> Self {
        let text = |s: &Option<ShortString>| s.as_ref().map(ShortString::to_string);
        Properties {
            content_type: text(p.content_type()),
            content_encoding: text(p.content_encoding()),
            headers: p.headers().as_ref().map(headers_of),
            delivery_mode: *p.delivery_mode(),
            priority: *p.priority(),
            correlation_id: text(p.correlation_id()),
            reply_to: text(p.reply_to()),
            expiration: text(p.expiration()),
            message_id: text(p.message_id()),
            timestamp: *p.timestamp(),
            kind: text(p.kind()),
            user_id: text(p.user_id()),
            app_id: text(p.app_id()),
            cluster_id: text(p.cluster_id()),
        }
    }
}

/// A short string of AMQP 0-9-1 (at most 255 bytes).
///
/// # Errors
/// `what` and the length, for a longer `s`.
fn short(s: &str, what: &str) -> Result<ShortString, String> {
    ShortString::try_new(s).map_err(|_| format!("{what} of {} bytes is longer than 255", s.len()))
}

/// A neutral header value as an AMQP field value.
///
/// # Errors
/// A short string value, or a nested table's key, longer than 255 bytes.
pub fn to_amqp(v: &HeaderValue) -> Result<AMQPValue, String> {
    Ok(match v {
        HeaderValue::Bool(b) => AMQPValue::Boolean(*b),
        HeaderValue::I8(n) => AMQPValue::ShortShortInt(*n),
        HeaderValue::U8(n) => AMQPValue::ShortShortUInt(*n),
        HeaderValue::I16(n) => AMQPValue::ShortInt(*n),
        HeaderValue::U16(n) => AMQPValue::ShortUInt(*n),
        HeaderValue::I32(n) => AMQPValue::LongInt(*n),
        HeaderValue::U32(n) => AMQPValue::LongUInt(*n),
        HeaderValue::I64(n) => AMQPValue::LongLongInt(*n),
        HeaderValue::F32(f) => AMQPValue::Float(*f),
        HeaderValue::F64(f) => AMQPValue::Double(*f),
        HeaderValue::Decimal { scale, value } => AMQPValue::DecimalValue(DecimalValue {
            scale: *scale,
            value: *value,
        }),
        HeaderValue::ShortString(s) => AMQPValue::ShortString(short(s, "a short string value")?),
        HeaderValue::LongString(s) => AMQPValue::LongString(LongString::from(s.clone())),
        HeaderValue::Array(a) => AMQPValue::FieldArray(FieldArray::from(
            a.iter().map(to_amqp).collect::<Result<Vec<_>, _>>()?,
        )),
        HeaderValue::Timestamp(t) => AMQPValue::Timestamp(*t),
        HeaderValue::Table(t) => AMQPValue::FieldTable(to_field_table(t)?),
        HeaderValue::ByteArray(b) => AMQPValue::ByteArray(ByteArray::from(b.clone())),
        HeaderValue::Void => AMQPValue::Void,
    })
}

/// Neutral headers as an AMQP header table.
///
/// # Errors
/// A header name, or a short string value, longer than 255 bytes.
pub fn to_field_table(headers: &Headers) -> Result<FieldTable, String> {
    let mut table = FieldTable::default();
    for (k, v) in headers {
        table.insert(short(k, "a header name")?, to_amqp(v)?);
    }
    Ok(table)
}

/// Neutral properties as `lapin`'s.
///
/// # Errors
/// A property or header that does not fit AMQP 0-9-1 ([`to_field_table`]; a property
/// longer than 255 bytes).
pub fn to_basic_properties(p: &Properties) -> Result<BasicProperties, String> {
    let mut out = BasicProperties::default();
    let set =
        |value: &Option<String>, what: &str| value.as_deref().map(|s| short(s, what)).transpose();
    if let Some(v) = set(&p.content_type, "content_type")? {
        out = out.with_content_type(v);
    }
    if let Some(v) = set(&p.content_encoding, "content_encoding")? {
        out = out.with_content_encoding(v);
    }
    if let Some(h) = &p.headers {
        out = out.with_headers(to_field_table(h)?);
    }
    if let Some(v) = p.delivery_mode {
        out = out.with_delivery_mode(v);
    }
    if let Some(v) = p.priority {
        out = out.with_priority(v);
    }
    if let Some(v) = set(&p.correlation_id, "correlation_id")? {
        out = out.with_correlation_id(v);
    }
    if let Some(v) = set(&p.reply_to, "reply_to")? {
        out = out.with_reply_to(v);
    }
    if let Some(v) = set(&p.expiration, "expiration")? {
        out = out.with_expiration(v);
    }
    if let Some(v) = set(&p.message_id, "message_id")? {
        out = out.with_message_id(v);
    }
    if let Some(v) = p.timestamp {
        out = out.with_timestamp(v);
    }
    if let Some(v) = set(&p.kind, "type")? {
        out = out.with_type(v);
    }
    if let Some(v) = set(&p.user_id, "user_id")? {
        out = out.with_user_id(v);
    }
    if let Some(v) = set(&p.app_id, "app_id")? {
        out = out.with_app_id(v);
    }
    if let Some(v) = set(&p.cluster_id, "cluster_id")? {
        out = out.with_cluster_id(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::{replay_properties, DeadLetter, REPLAY_COUNT};

    fn every_value() -> FieldTable {
        let mut inner = FieldTable::default();
        inner.insert("n".into(), AMQPValue::ShortShortUInt(1));
        let mut t = FieldTable::default();
        for (k, v) in [
            ("bool", AMQPValue::Boolean(true)),
            ("i8", AMQPValue::ShortShortInt(-1)),
            ("u8", AMQPValue::ShortShortUInt(2)),
            ("i16", AMQPValue::ShortInt(-3)),
            ("u16", AMQPValue::ShortUInt(4)),
            ("i32", AMQPValue::LongInt(-5)),
            ("u32", AMQPValue::LongUInt(6)),
            ("i64", AMQPValue::LongLongInt(-7)),
            ("f32", AMQPValue::Float(1.5)),
            ("f64", AMQPValue::Double(2.5)),
            (
                "dec",
                AMQPValue::DecimalValue(DecimalValue { scale: 2, value: 5 }),
            ),
            ("short", AMQPValue::ShortString("s".into())),
            ("long", AMQPValue::LongString("l".into())),
            (
                "array",
                AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::Void])),
            ),
            ("ts", AMQPValue::Timestamp(9)),
            ("table", AMQPValue::FieldTable(inner)),
            (
                "bytes",
                AMQPValue::ByteArray(ByteArray::from(vec![0u8, 255])),
            ),
            ("void", AMQPValue::Void),
        ] {
            t.insert(k.into(), v);
        }
        t
    }

    #[test]
    fn properties_and_every_header_type_survive_the_round_trip() {
        let props = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_content_encoding("gzip".into())
            .with_headers(every_value())
            .with_delivery_mode(2)
            .with_priority(3)
            .with_correlation_id("c".into())
            .with_reply_to("r".into())
            .with_expiration("60000".into())
            .with_message_id("m".into())
            .with_timestamp(1)
            .with_type("t".into())
            .with_user_id("u".into())
            .with_app_id("a".into())
            .with_cluster_id("k".into());
        let neutral = Properties::from(&props);
        assert_eq!(to_basic_properties(&neutral), Ok(props.clone()));
        // No header table stays no header table.
        let bare = BasicProperties::default();
        assert_eq!(Properties::from(&bare).headers, None);
        assert_eq!(to_basic_properties(&Properties::from(&bare)), Ok(bare));
        // The neutral reading of lapin's properties, as the tests and engines use it.
        let copy = replay_properties(&props, "r-1", 5);
        assert_eq!(
            DeadLetter::read("q", &copy, b"", 0).headers[REPLAY_COUNT],
            1
        );
    }

    #[test]
    fn what_does_not_fit_amqp_is_an_error_not_a_panic() {
        let long = "x".repeat(256);
        let mut h = Headers::new();
        h.insert(long.clone(), HeaderValue::Void);
        assert!(to_field_table(&h).expect_err("name").contains("256 bytes"));
        let mut h = Headers::new();
        h.insert("k".into(), HeaderValue::ShortString(long.clone()));
        assert!(to_field_table(&h).is_err());
        let p = Properties {
            message_id: Some(long),
            ..Properties::default()
        };
        assert!(to_basic_properties(&p).is_err());
    }
}
