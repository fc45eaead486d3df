//! A cheap pre-scan of the flow nesting (`[ ]`, `{ }`) of a YAML text, run before the
//! YAML parser sees it.
//!
//! libyaml (inside serde_yaml_ng) spends time quadratic in the depth of nested flow
//! collections: `{a: ` repeated 50,000 times (200 KB) costs seconds of CPU, and twice as
//! deep costs four times as long (the upstream reports are yaml/libyaml#286 and
//! yaml/yaml-serde#1). serde_yaml_ng refuses a document nested deeper than 128 levels
//! ("recursion limit exceeded"), but only after the parser has read the whole document,
//! and it has no setting to stop earlier. So [`find_too_deep`] looks for such nesting in
//! one linear pass first.
//!
//! It reads just enough YAML to tell a flow collection from text: quoted scalars,
//! comments, block scalars (`|`, `>`), node properties (`&anchor`, `!tag`), and brackets
//! of a plain scalar in block context, on its first line (`a: x[1]`) or on the lines it
//! goes on (indented deeper than its key or entry, as the parser's rule has it), are not
//! nesting. Block nesting (indentation) costs the parser linear time and is left to it.
//! Where the scan could differ from the parser, it errs towards counting, and only in
//! text the parser refuses anyway. tests/fuzz.rs holds it to both sides: on any text the
//! parser reads it never counts deeper than the parsed value is, and on flow text (JSON,
//! alone or as a block value) it counts exactly the parsed depth. So no document
//! serde_yaml_ng accepts is refused, and every flow collection deeper than [`MAX_DEPTH`]
//! is caught before the parser sees it.

/// Deepest flow nesting read (levels of `[ ]` / `{ }`): serde_yaml_ng's own recursion
/// limit, so no document it would accept is refused. The resources of this operator
/// nest about 10 levels deep.
pub const MAX_DEPTH: usize = 128;

/// Where a flow collection opened one level deeper than allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    /// 1-based YAML document of the text (as serde_yaml_ng counts them).
    pub document: usize,
    /// 1-based line of the bracket.
    pub line: usize,
    /// 1-based column (in characters) of the bracket.
    pub column: usize,
}

/// Finds the first `[` or `{` that opens a flow collection nested deeper than `max`
/// levels in `text`, in time linear in its length.
///
/// Returns `None` when the text nests at most `max` flow levels (or its syntax is such
/// that the parser stops before any deeper level).
pub fn find_too_deep(text: &str, max: usize) -> Option<TooDeep> {
    let mut scan = Scan {
        bytes: text.as_bytes(),
        i: 0,
        line: 1,
        line_start: 0,
        depth: 0,
        node_start: true,
        after_node: false,
        space_before: true,
        document: 0,
        in_document: false,
        line_head: true,
        plain_open: false,
        token_col: 0,
        anchor_col: None,
        continuation: None,
        in_collection: false,
    };
    scan.run(max)
}

/// The scanner's state: a position in the text and what the last tokens allow next.
struct Scan<'a> {
    bytes: &'a [u8],
    i: usize,
    line: usize,
    line_start: usize,
    /// Open flow collections.
    depth: usize,
    /// A node may start here (after `- `, `: `, `? `, `[`, `{`, `,`, a new line in block
    /// context, or a property): a quote or bracket here is syntax, not text.
    node_start: bool,
    /// A quoted scalar or a flow collection just ended: a `:` right after it is a value
    /// indicator (`{"a":[`).
    after_node: bool,
    /// The previous byte is white space or a line start: a `#` here starts a comment.
    space_before: bool,
    document: usize,
    in_document: bool,
    /// Block context: the first byte of a line that is neither blank nor a comment is
    /// still ahead on this line.
    line_head: bool,
    /// Block context: the line so far ends in a plain scalar (which may go on in the
    /// next lines).
    plain_open: bool,
    /// Block context: the column of the token that began the node being written on this
    /// line, and that of the last key or `-`/`?` entry of the line.
    token_col: usize,
    anchor_col: Option<usize>,
    /// Block context: a plain scalar goes on at the start of a line indented at least
    /// this far (the parser's rule: deeper than the collection it belongs to).
    continuation: Option<usize>,
    /// The document has a block collection (a key or an entry) so far: a scalar without
    /// one is the document's root, which goes on at any indentation.
    in_collection: bool,
}

impl Scan<'_> {
    fn at(&self, i: usize) -> Option<u8> {
        self.bytes.get(i).copied()
    }

    /// White space, a line break or the end of the text at `i`.
    fn blank(&self, i: usize) -> bool {
        matches!(self.at(i), None | Some(b' ' | b'\t' | b'\r' | b'\n'))
    }

    fn column(&self) -> usize {
        self.i - self.line_start
    }

    fn run(&mut self, max: usize) -> Option<TooDeep> {
        while let Some(b) = self.at(self.i) {
            if self.i == self.line_start && self.line_marker() {
                continue;
            }
            if !matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'#') && !self.in_document {
                self.document += 1;
                self.in_document = true;
            }
            match b {
                b'\n' => {
                    self.line_break();
                    continue;
                }
                b' ' | b'\t' | b'\r' => {
                    self.i += 1;
                    self.space_before = true;
                    continue;
                }
                _ if self.line_head => self.line_head(b),
                _ => {}
            }
            match b {
                b'#' if self.space_before => {
                    self.plain_open = false;
                    self.skip_line();
                }
                b'[' | b'{' if self.depth > 0 || self.node_start => {
                    self.depth += 1;
                    if self.depth > max {
                        return Some(self.here());
                    }
                    self.i += 1;
                    self.node_start = true;
                    self.after_node = false;
                    self.plain_open = false;
                }
                b']' | b'}' if self.depth > 0 => {
                    self.depth -= 1;
                    self.i += 1;
                    self.node_start = false;
                    self.after_node = true;
                }
                _ => self.token(b),
            }
            self.space_before = false;
        }
        None
    }

    /// A line break: in block context, what may start on the next line depends on
    /// whether a plain scalar was left open (it may go on there).
    fn line_break(&mut self) {
        if self.depth == 0 {
            // A blank or comment line changes nothing; a continuation line keeps the rule
            // of the scalar's first line; a scalar that began on this line may go on
            // deeper than its key or entry, or (a line of text alone) as deep as it.
            if !self.line_head {
                self.continuation = match (self.plain_open, self.continuation) {
                    (true, Some(min)) => Some(min),
                    (true, None) => Some(match self.anchor_col {
                        Some(c) => c + 1,
                        None if self.in_collection => self.token_col,
                        None => 0,
                    }),
                    (false, _) => None,
                };
            }
            self.node_start = true;
            self.line_head = true;
            self.plain_open = false;
            self.anchor_col = None;
        }
        self.i += 1;
        self.new_line_at(self.i);
        self.space_before = true;
    }

    /// The first byte of a line in block context that is not white space: a comment ends
    /// a plain scalar; a line indented as far as [`Scan::continuation`] says goes on with
    /// it (its text is no syntax); any other line starts a node.
    fn line_head(&mut self, b: u8) {
        if self.depth > 0 {
            self.line_head = false;
            return;
        }
        if b == b'#' {
            self.continuation = None;
            return;
        }
        self.line_head = false;
        let col = self.column();
        self.token_col = col;
        if self.continuation.is_some_and(|min| col >= min) {
            self.node_start = false;
            self.plain_open = true;
        } else {
            self.continuation = None;
        }
    }

    /// At a line start: `---` or `...` (a document starts or ends: flow levels end
    /// there, as the parser stops at an unclosed one) or a `%` directive. Returns whether
    /// it consumed something.
    fn line_marker(&mut self) -> bool {
        let rest = &self.bytes[self.i..];
        if (rest.starts_with(b"---") || rest.starts_with(b"...")) && self.blank(self.i + 3) {
            if rest[0] == b'-' {
                self.document += 1;
                self.in_document = true;
            } else {
                self.in_document = false;
            }
            self.depth = 0;
            self.i += 3;
            self.node_start = true;
            self.space_before = false;
            self.line_head = false;
            self.plain_open = false;
            self.continuation = None;
            self.in_collection = false;
            return true;
        }
        if rest.first() == Some(&b'%') && !self.in_document {
            self.skip_line();
            return true;
        }
        false
    }

    /// Anything but white space, comments and brackets that open or close a level.
    fn token(&mut self, b: u8) {
        let flow = self.depth > 0;
        let indicator = |s: &Self| s.blank(s.i + 1);
        if self.node_start && !flow && !matches!(b, b'-' | b'?' | b':') {
            self.token_col = self.column();
        }
        match b {
            b'"' | b'\'' if self.node_start => {
                self.skip_quoted(b);
                self.node_start = false;
                self.after_node = true;
                self.plain_open = false;
                return;
            }
            b'&' if self.node_start => {
                // An anchor (letters, digits, `-`, `_`, as libyaml reads it): the node
                // follows it.
                self.i += 1;
                while self
                    .at(self.i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
                {
                    self.i += 1;
                }
                return;
            }
            b'!' if self.node_start => {
                // A tag: the node follows it.
                while !self.blank(self.i)
                    && !matches!(self.at(self.i), Some(b',' | b'[' | b']' | b'{' | b'}'))
                {
                    self.i += 1;
                }
                return;
            }
            b'|' | b'>' if self.node_start && !flow => {
                self.skip_block_scalar();
                return;
            }
            b',' if flow => self.node_start = true,
            b':' if indicator(self)
                || (flow
                    && (self.after_node
                        || matches!(
                            self.at(self.i + 1),
                            Some(b',' | b'[' | b']' | b'{' | b'}')
                        ))) =>
            {
                self.node_start = true;
                self.plain_open = false;
                self.anchor_col = Some(self.token_col);
                self.in_collection |= !flow;
            }
            b'-' | b'?' if self.node_start && indicator(self) => {
                self.node_start = true;
                self.plain_open = false;
                self.anchor_col = Some(self.column());
                self.in_collection |= !flow;
            }
            _ => {
                self.node_start = false;
                self.plain_open = !flow;
            }
        }
        self.after_node = false;
        self.i += 1;
    }

    fn skip_line(&mut self) {
        while self.at(self.i).is_some_and(|b| b != b'\n') {
            self.i += 1;
        }
    }

    /// From the opening quote at `self.i` past the closing one (`\` escapes in double
    /// quotes, `''` in single quotes); line breaks inside are counted.
    fn skip_quoted(&mut self, quote: u8) {
        self.i += 1;
        while let Some(b) = self.at(self.i) {
            self.i += 1;
            match b {
                b'\\' if quote == b'"' => {
                    if self.at(self.i) == Some(b'\n') {
                        self.new_line_at(self.i + 1);
                    }
                    self.i += 1;
                }
                b'\'' if quote == b'\'' && self.at(self.i) == Some(b'\'') => self.i += 1,
                b'\n' => self.new_line_at(self.i),
                _ if b == quote => return,
                _ => {}
            }
        }
    }

    fn new_line_at(&mut self, start: usize) {
        self.line += 1;
        self.line_start = start;
    }

    /// A block scalar (`|` or `>` at `self.i`): its header line, then every line
    /// indented at least as far as its first non-blank line, when that one is indented
    /// deeper than the line of the indicator.
    fn skip_block_scalar(&mut self) {
        let indent =
            |s: &Self, start: usize| s.bytes[start..].iter().take_while(|b| **b == b' ').count();
        let parent = indent(self, self.line_start);
        self.skip_line();
        let mut content: Option<usize> = None;
        while self.at(self.i) == Some(b'\n') {
            let next = self.i + 1;
            let n = indent(self, next);
            let blank_line = matches!(self.at(next + n), None | Some(b'\n' | b'\r'));
            let inside = match content {
                _ if blank_line => true,
                None => n > parent,
                Some(c) => n >= c,
            };
            if !inside {
                break;
            }
            if !blank_line && content.is_none() {
                content = Some(n);
            }
            self.i = next;
            self.new_line_at(next);
            self.skip_line();
        }
        self.node_start = true;
        self.plain_open = false;
    }

    fn here(&self) -> TooDeep {
        let column = self.bytes[self.line_start..self.i]
            .iter()
            .filter(|b| (**b & 0xC0) != 0x80)
            .count()
            + 1;
        TooDeep {
            document: self.document.max(1),
            line: self.line,
            column,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str, max: usize) -> bool {
        find_too_deep(text, max).is_none()
    }

    #[test]
    fn deep_flow_nesting_is_found_where_it_goes_too_deep() {
        let text = "{a: ".repeat(50_000);
        assert_eq!(
            find_too_deep(&text, MAX_DEPTH),
            Some(TooDeep {
                document: 1,
                line: 1,
                column: 128 * 4 + 1
            })
        );
        let text = format!("a: 1\n---\nkind: x\nspec: {}", "[".repeat(200));
        let found = find_too_deep(&text, MAX_DEPTH).expect("found");
        assert_eq!((found.document, found.line, found.column), (2, 4, 7 + 128));
    }

    #[test]
    fn nesting_up_to_the_limit_passes() {
        let text = format!("{}1{}\n", "[".repeat(3), "]".repeat(3));
        assert!(depth_ok(&text, 3));
        assert!(!depth_ok(&text, 2));
        // Closed levels do not add up.
        assert!(depth_ok("a: [[1], [2], {b: [3]}]\nc: {d: [[4]]}\n", 3));
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
            "&a:[[[[\n",
            "a\n[[[[\n",
            "  a\n[[[[\n",
            "a: text\n  [[[[ more text\n\n  [[[[\n",
            "- - text\n    [[[[\n",
        ] {
            assert!(depth_ok(text, 2), "{text:?}");
        }
    }

    #[test]
    fn nesting_after_text_and_markers_is_still_counted() {
        for text in [
            "a: |\n  text\nb: [[[[\n",
            "--- [[[[\n",
            "a: &x [[[[\n",
            "a: !!seq [[[[\n",
            "{\"a\":[[[[\n",
            "? [[[[\n",
            "- - [[[[\n",
            "a: [b, [c, [d, [e]]]]\n",
            "%YAML 1.1\n--- [[[[\n",
            "- key: text\n  other: [[[[\n",
            "a: text\n[[[[\n",
            "a: text # comment\n  [[[[\n",
        ] {
            assert!(!depth_ok(text, 3), "{text:?}");
        }
    }

    #[test]
    fn a_long_text_of_shallow_nesting_passes() {
        // 16 MiB of brackets, four levels at most.
        let text = format!("[{}1]\n", "[[[]]],".repeat(2_400_000));
        assert!(depth_ok(&text, 4));
        assert!(!depth_ok(&text, 3));
    }
}
