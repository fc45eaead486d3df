//! A fast look at how deeply a YAML text nests, before serde_yaml_ng parses it.
//!
//! libyaml (inside serde_yaml_ng) spends time quadratic in the depth of nested flow
//! collections: `{a: ` repeated 50,000 times (200 KB) costs seconds of CPU, and twice as
//! deep costs four times as long (the upstream reports are yaml/libyaml#286 and
//! yaml/yaml-serde#1). serde_yaml_ng refuses a document nested deeper than 128 levels
//! ("recursion limit exceeded"), but only after the parser has read the whole document,
//! and it has no setting to stop earlier.
//!
//! So [`find_too_deep`] first reads the text's event stream with `saphyr-parser` (the
//! maintained pure-Rust YAML parser of the yaml-rust lineage, linear in the depth and with
//! its own recursion limit) and stops at the first collection (flow or block) nested
//! deeper than the limit. The limit is serde_yaml_ng's own ([`MAX_DEPTH`]), counted the
//! way it counts (every sequence and mapping), so nothing serde_yaml_ng would accept is
//! refused. A text saphyr cannot read gets no verdict here: serde_yaml_ng then reports its
//! own error. tests/fuzz.rs holds the two parsers to the same depth on both sides.

use saphyr_parser::{Event, Parser};

/// Deepest nesting read (sequences and mappings, flow or block): serde_yaml_ng's own
/// recursion limit, so no document it would accept is refused. The resources of this
/// operator nest about 10 levels deep.
pub const MAX_DEPTH: usize = 128;

/// Where a collection opened one level deeper than allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    /// 1-based YAML document of the text (as serde_yaml_ng counts them).
    pub document: usize,
    /// 1-based line of the collection's start.
    pub line: usize,
    /// 1-based column (in characters) of the collection's start.
    pub column: usize,
}

/// Finds the first sequence or mapping of `text` nested deeper than `max` levels, in time
/// linear in its length.
///
/// Returns `None` when every document nests at most `max` levels, and when the text is
/// not YAML that saphyr reads up to such a collection (serde_yaml_ng reports that text's
/// error itself).
pub fn find_too_deep(text: &str, max: usize) -> Option<TooDeep> {
    let mut depth = 0usize;
    let mut document = 0usize;
    for event in Parser::new_from_str(text) {
        let (event, span) = match event {
            Ok(e) => e,
            // saphyr's own recursion limit is above MAX_DEPTH: a text it stops there nests
            // deeper than any limit we use. Its ScanError carries only a text (no kind),
            // so the limit is known by its message, `recursion limit exceeded`; a new
            // wording only loses this early verdict (serde_yaml_ng still refuses the text).
            Err(e) if e.info().contains("recursion limit") => {
                return Some(TooDeep {
                    document: document.max(1),
                    line: e.marker().line(),
                    column: e.marker().col() + 1,
                })
            }
            Err(_) => return None,
        };
        match event {
            Event::DocumentStart(_) => {
                document += 1;
                depth = 0;
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                depth += 1;
                if depth > max {
                    return Some(TooDeep {
                        document,
                        line: span.start.line(),
                        column: span.start.col() + 1,
                    });
                }
            }
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str, max: usize) -> bool {
        find_too_deep(text, max).is_none()
    }

    #[test]
    fn deep_flow_nesting_is_found_where_it_goes_too_deep() {
        // saphyr reads ahead within a line (simple keys): its own recursion limit (255
        // levels) stops it before it hands out the 129th mapping, and that is where the
        // text is reported.
        let text = "{a: ".repeat(50_000);
        assert_eq!(
            find_too_deep(&text, MAX_DEPTH),
            Some(TooDeep {
                document: 1,
                line: 1,
                column: 255 * 4 + 1
            })
        );
        let text = "[\n".repeat(50_000);
        let found = find_too_deep(&text, MAX_DEPTH).expect("found");
        assert_eq!(found.document, 1);
        assert!(found.line > MAX_DEPTH && found.line <= 256, "{found:?}");
        let text = format!("a: 1\n---\nkind: x\nspec: {}", "[".repeat(200));
        let found = find_too_deep(&text, MAX_DEPTH).expect("found");
        // The document's mapping is level 1: the 127th bracket is level 128.
        assert_eq!((found.document, found.line, found.column), (2, 4, 7 + 127));
        // Deeper than saphyr's own limit: still found, at once.
        let found = find_too_deep(&"[".repeat(100_000), 100_000).expect("found");
        assert_eq!((found.document, found.line), (1, 1));
    }

    #[test]
    fn nesting_up_to_the_limit_passes_block_and_flow_alike() {
        let text = format!("{}1{}\n", "[".repeat(3), "]".repeat(3));
        assert!(depth_ok(&text, 3));
        assert!(!depth_ok(&text, 2));
        // Closed levels do not add up.
        assert!(depth_ok("a: [[1], [2], {b: [3]}]\nc: {d: [[4]]}\n", 4));
        assert!(!depth_ok("a: [[1], [2], {b: [3]}]\nc: {d: [[4]]}\n", 3));
        // Block nesting counts as serde_yaml_ng counts it.
        assert!(depth_ok("a:\n  b:\n    - c: 1\n", 4));
        assert!(!depth_ok("a:\n  b:\n    - c: 1\n", 3));
    }

    #[test]
    fn brackets_in_text_are_not_nesting() {
        for text in [
            "a: \"[[[[\"\n",
            "a: '[[''[['\n",
            "a: x[[[[\n",
            "a: [\"]]\", '[[[[']\n",
            "a: |\n  [[[[\n   {{{{\n\n  [[[[\nb: 1\n",
            "- >-\n    [[[[\n- 2\n",
            "a: 1 # [[[[\n",
            "# [[[[\na: 1\n",
            "a: \"multi\n  line [[[[\"\n",
            "a: text\n  [[[[ more text\n\n  [[[[\n",
        ] {
            assert!(depth_ok(text, 2), "{text:?}");
        }
    }

    #[test]
    fn a_text_saphyr_cannot_read_gets_no_verdict() {
        assert_eq!(find_too_deep("a: [1\nb: ]]]\n", 5), None);
    }

    #[test]
    fn a_long_text_of_shallow_nesting_passes() {
        // 1 MiB of brackets, four levels at most.
        let text = format!("[{}1]\n", "[[[]]],".repeat(150_000));
        assert!(depth_ok(&text, 4));
        assert!(!depth_ok(&text, 3));
    }
}
