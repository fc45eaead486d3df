//! Text from outside — message ids, headers and bodies, queue and exchange names read from
//! messages (`dlq-original-*`, `x-death`), the broker's error texts — made safe to print
//! on a terminal. Every human-readable output (the `dlq` commands' tables, the CLI's
//! error line, the DeadLetterReplay's `status.reasons`, condition messages and Events,
//! which `kubectl` prints) passes such text through [`escape`] (or [`shown`], which also
//! cuts it), so that a dead letter carrying `ESC ] 0 ; … BEL` or `ESC [ 2 J` cannot retitle
//! or clear the screen of whoever inspects it.
//!
//! Escaped are the Unicode general categories `Cc` (C0 controls, DEL, C1 controls: the
//! terminal control sequences, also newline and tab, which could forge table rows), `Cf`
//! (format characters: the bidirectional overrides and isolates such as U+202E, which
//! reorder what is shown — the "Trojan Source" attack, CVE-2021-42574 — and zero-width
//! characters), `Zl` and `Zp` (line and paragraph separators), matched by the `regex`
//! crate's Unicode classes. Each becomes `\u{…}` with its code point in hex, as Rust's
//! `escape_debug` writes it; nothing else changes (a backslash stays a backslash), so
//! [`escape`] of escaped text changes nothing.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// The bytes of a text shown in human-readable output before it is cut ([`shown`]): the
/// body preview of `dlq inspect` (without `--show-payload`), and every header value,
/// message id, queue name or reason quoting a message.
pub const PREVIEW_BYTES: usize = 256;

/// The characters [`escape`] replaces (module doc).
const UNSAFE: &str = r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]";

/// The compiled [`UNSAFE`] class (a constant pattern; `tests::the_class_compiles`).
static UNSAFE_RE: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(UNSAFE).ok());

/// `text` with every control, format and line/paragraph separator character written as
/// `\u{HEX}` (module doc); borrowed when there is none.
pub fn escape(text: &str) -> Cow<'_, str> {
    match UNSAFE_RE.as_ref() {
        Some(re) => re.replace_all(text, |c: &regex::Captures<'_>| {
            c[0].chars()
                .map(|ch| format!("\\u{{{:x}}}", u32::from(ch)))
                .collect::<String>()
        }),
        // Unreachable (the pattern is a constant the tests compile); should it ever fail,
        // every character that is not plainly printable ASCII or a letter is escaped.
        None => Cow::Owned(
            text.chars()
                .map(|ch| {
                    if ch == ' ' || ch.is_ascii_graphic() || ch.is_alphanumeric() {
                        ch.to_string()
                    } else {
                        format!("\\u{{{:x}}}", u32::from(ch))
                    }
                })
                .collect(),
        ),
    }
}

/// [`escape`] of each line of `text`, the line breaks kept: for a multi-line message
/// written by this program (an error with its explanation) that quotes outside text.
pub fn escape_lines(text: &str) -> String {
    text.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

/// At most `max` bytes of `text`, cut on a character boundary (never inside a UTF-8
/// sequence), and whether it was cut. The rule of the body preview of `dlq inspect`.
pub fn cut(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// `text` for human-readable output: cut to `max` bytes ([`cut`]) and escaped
/// ([`escape`]); a cut one ends in `… (N bytes)`, N the length of the whole text in bytes.
pub fn shown(text: &str, max: usize) -> String {
    let (kept, was_cut) = cut(text, max);
    let kept = escape(kept);
    if was_cut {
        format!("{kept}… ({} bytes)", text.len())
    } else {
        kept.into_owned()
    }
}

/// JSON text (as `serde_json` writes it, also pretty) with the characters [`escape`]
/// replaces, which `serde_json` leaves raw above U+001F (DEL, C1 controls, bidirectional
/// overrides), written
/// as JSON `\uXXXX` escapes (UTF-16 code units, RFC 8259 §7): the same JSON value, safe on a
/// terminal. Such characters can stand only inside JSON strings, where the escape is valid.
pub fn escape_json(json: &str) -> Cow<'_, str> {
    match UNSAFE_RE.as_ref() {
        Some(re) => re.replace_all(json, |c: &regex::Captures<'_>| {
            let mut units = [0u16; 2];
            c[0].chars()
                .flat_map(|ch| match ch {
                    // JSON's own whitespace between tokens (within strings `serde_json`
                    // escapes these itself).
                    '\n' | '\r' | '\t' => vec![ch.to_string()],
                    _ => ch
                        .encode_utf16(&mut units)
                        .iter()
                        .map(|u| format!("\\u{u:04x}"))
                        .collect(),
                })
                .collect::<String>()
        }),
        None => Cow::Borrowed(json),
    }
}

/// YAML text (as `serde_yaml_ng` writes it) with the characters [`escape`] replaces that
/// the emitter leaves raw — the format characters it counts as printable, such as the
/// bidirectional override U+202E — written as YAML escapes (`\uXXXX`, `\UXXXXXXXX` above
/// U+FFFF): inside a double-quoted scalar the same value, inside a plain one the escape as
/// text; either way safe on a terminal. Line breaks and tabs stay.
pub fn escape_yaml(yaml: &str) -> Cow<'_, str> {
    match UNSAFE_RE.as_ref() {
        Some(re) => re.replace_all(yaml, |c: &regex::Captures<'_>| {
            c[0].chars()
                .map(|ch| match ch {
                    '\n' | '\r' | '\t' => ch.to_string(),
                    _ if u32::from(ch) <= 0xFFFF => format!("\\u{:04x}", u32::from(ch)),
                    _ => format!("\\U{:08x}", u32::from(ch)),
                })
                .collect::<String>()
        }),
        None => Cow::Borrowed(yaml),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_output_carries_no_raw_bidi_override_and_still_parses() {
        let value = serde_json::json!({"name": "rp\u{202e}evil", "multi": "a\nb"});
        let yaml = serde_yaml_ng::to_string(&value).expect("yaml");
        let safe = escape_yaml(&yaml);
        assert!(!safe.contains('\u{202e}'), "{safe}");
        assert!(safe.contains("\\u202e"), "{safe}");
        let back: serde_json::Value = serde_yaml_ng::from_str(&safe).expect("still YAML");
        assert!(back["name"].as_str().is_some_and(|n| n.starts_with("rp")));
        assert_eq!(back["multi"], "a\nb", "line breaks kept");
    }

    #[test]
    fn the_class_compiles() {
        assert!(Regex::new(UNSAFE).is_ok());
        assert!(UNSAFE_RE.is_some());
    }

    #[test]
    fn terminal_sequences_and_bidi_overrides_are_escaped() {
        assert_eq!(
            escape("\u{1b}]0;owned\u{7}\u{1b}[2J"),
            "\\u{1b}]0;owned\\u{7}\\u{1b}[2J"
        );
        assert_eq!(escape("a\u{7f}b\u{9b}c\u{85}"), "a\\u{7f}b\\u{9b}c\\u{85}");
        assert_eq!(escape("x\u{202e}y\u{2066}z"), "x\\u{202e}y\\u{2066}z");
        assert_eq!(escape("l1\nl2\tl3\r"), "l1\\u{a}l2\\u{9}l3\\u{d}");
        assert_eq!(
            escape("\u{200b}\u{feff}\u{2028}\u{e0001}"),
            "\\u{200b}\\u{feff}\\u{2028}\\u{e0001}"
        );
        // Printable text, also non-ASCII and JSON, is left alone (and borrowed).
        let plain = "order-1000 Zürich 東京 {\"id\":1} \\ é";
        assert!(matches!(escape(plain), Cow::Borrowed(_)));
        assert_eq!(escape(plain), plain);
        // Escaping escaped text changes nothing.
        let once = escape("\u{1b}[31m").into_owned();
        assert_eq!(escape(&once), once);
    }

    #[test]
    fn lines_keep_their_breaks_only() {
        assert_eq!(
            escape_lines("error: queue \u{1b}[2J\nbefore the error: 3"),
            "error: queue \\u{1b}[2J\nbefore the error: 3"
        );
    }

    #[test]
    fn long_texts_are_cut_on_a_character_boundary_and_say_so() {
        assert_eq!(cut("héllo", 2), ("h", true));
        assert_eq!(cut("héllo", 3), ("hé", true));
        assert_eq!(cut("héllo", 6), ("héllo", false));
        let big = "x".repeat(102_400);
        let s = shown(&big, PREVIEW_BYTES);
        assert_eq!(s, format!("{}… (102400 bytes)", "x".repeat(256)));
        assert_eq!(shown("short\u{1b}", PREVIEW_BYTES), "short\\u{1b}");
        // Cut first, escaped after: the escapes never make a cut text longer than its
        // kept bytes' escapes.
        let evil = "\u{1b}".repeat(1000);
        assert_eq!(
            shown(&evil, 4),
            format!("{}… (1000 bytes)", "\\u{1b}".repeat(4))
        );
    }

    #[test]
    fn json_keeps_its_value_and_loses_the_raw_characters() {
        let value = serde_json::json!({"h": "a\u{9b}b\u{202e}c\u{e0001}d\u{1b}"});
        let text = serde_json::to_string_pretty(&value).expect("json");
        let safe = escape_json(&text);
        assert!(
            !UNSAFE_RE
                .as_ref()
                .expect("re")
                .is_match(&safe.replace('\n', "")),
            "{safe}"
        );
        assert!(
            safe.contains("\\u009b") && safe.contains("\\udb40\\udc01"),
            "{safe}"
        );
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back, value);
    }
}
