//! The house in layers (docs/ARCHITECTURE.md, "Modules"): reads the library's own source
//! and fails when its top-level modules import each other the wrong way.
//!
//! - Every top-level module has a layer ([`LAYERS`]: domain, seam, adapters, shared
//!   engines, drivers) and imports only from its own layer and the layers below.
//! - A driver (`console`, `controller`, `standalone`, `report`; the CLI is the binary, which
//!   the library never names) imports no other driver.
//! - No circle among the top-level modules of `src/`.
//!
//! An import is a `crate::NAME` path in code (a `use` or a path in an expression), a
//! top-level name of a `use crate::{…}` group, or a `super::` path that climbs to the crate
//! root. Comments, string and character literals, and test-only code (a `mod` declared
//! under `#[cfg(test)]`, and `#[cfg(test)]` items inside a file) are not read: tests may
//! build fixtures from any layer. Modules are found from `src/lib.rs` by their `mod NAME;`
//! declarations (the crate has no `#[path]` module); `src/lib.rs` itself must hold nothing
//! but those, so that no re-export at the root can hide an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The modules that drive the core: each is a way to run the product.
const DRIVERS: [&str; 4] = ["console", "controller", "standalone", "report"];

/// Every top-level module by layer, lowest first. A module imports from its own layer and
/// the layers below only; within a layer, the circle check keeps the order.
const LAYERS: [(&str, &[&str]); 5] = [
    (
        "domain",
        &[
            "alerts",
            "backoff",
            "clock",
            "compensation",
            "crd",
            "duration",
            "error_class",
            "filter",
            "lock",
            "manifest",
            "maturity",
            "monitor",
            "nesting",
            "object",
            "ownership",
            "printable",
            "rbac",
            "redis_keys",
            "topology",
        ],
    ),
    ("seam", &["wire", "dlq", "broker"]),
    ("adapters", &["rabbitmq", "redis"]),
    (
        "shared engines",
        &[
            "access",
            "client",
            "collector",
            "metrics",
            "reconcile",
            "resolve",
            "router",
            "serve",
            "status",
        ],
    ),
    ("drivers", &DRIVERS),
];

/// The layer index of `module`, if it has one.
fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// The source of `path`, with comments, literals and `#[cfg(test)]` items blanked out.
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("a source file of src/ is readable");
    strip_test_items(&blank_comments_and_literals(&text))
}

/// `text` with every comment and the inside of every string and character literal
/// replaced by spaces (line breaks kept), so that no brace, `//` or `crate::` in them is
/// read as code.
fn blank_comments_and_literals(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if c[i] == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&c, i) {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            out.push_str(&" ".repeat(j + 1 - i));
            i = j + 1;
            while i < c.len() {
                if c[i] == '"' && (0..hashes).all(|h| c.get(i + 1 + h) == Some(&'#')) {
                    out.push_str(&" ".repeat(1 + hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(c[i]));
                i += 1;
            }
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < c.len() {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c[i] == '\'' && (next == Some('\\') || c.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\u{7b}'); a lifetime has no closing quote.
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '\'' {
                if c[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Whether the character before `i` continues an identifier (`for` in `for"` is not a
/// raw string's `r`).
fn ident_before(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

/// `code` without each item that follows `#[cfg(test)]` (up to its `;` or the brace that
/// closes its body).
fn strip_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let semi = after.find(';');
        let brace = after.find('{');
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => closing_brace(after, b) + 1,
            (None, None) => after.len(),
        };
        rest = &after[end.min(after.len())..];
    }
    out.push_str(rest);
    out
}

/// The index of the brace that closes the one at `open`.
fn closing_brace(s: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in s[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    s.len()
}

/// The files of the modules declared in `file` (whose code is `code`), outside
/// `#[cfg(test)]`.
fn declared_modules(file: &Path, code: &str) -> Vec<PathBuf> {
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let dir = file.parent().expect("a file has a folder");
    let base = if matches!(stem, "lib" | "mod" | "main") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    let mut files = Vec::new();
    for line in code.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(pos) = words.iter().position(|w| *w == "mod") else {
            continue;
        };
        let Some(name) = words.get(pos + 1).and_then(|w| w.strip_suffix(';')) else {
            continue;
        };
        let flat = base.join(format!("{name}.rs"));
        let nested = base.join(name).join("mod.rs");
        files.push(if flat.exists() { flat } else { nested });
    }
    files
}

/// Every non-test source file of the library, by its top-level module.
fn library_files(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let lib = src.join("lib.rs");
    let mut by_module: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for top in declared_modules(&lib, &code_of(&lib)) {
        let name = top
            .strip_prefix(src)
            .ok()
            .and_then(|p| p.components().next())
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs").to_string())
            .expect("a module of src/");
        let mut todo = vec![top];
        while let Some(file) = todo.pop() {
            todo.extend(declared_modules(&file, &code_of(&file)));
            by_module.entry(name.clone()).or_default().push(file);
        }
    }
    by_module
}

/// The top-level modules that `code` (of a file `depth` modules below the crate root:
/// `src/a.rs` and `src/a/mod.rs` 1, `src/a/b.rs` 2) names through `crate::`, or through a
/// `super::` chain that climbs to the crate root.
fn imports(code: &str, depth: usize, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut note = |names: Vec<&str>| {
        for name in names {
            if modules.contains(name) {
                found.insert(name.to_string());
            }
        }
    };
    for (at, _) in code.match_indices("crate::") {
        if !code[..at].ends_with("::") && !code[..at].ends_with('$') {
            note(names_after(&code[at + "crate::".len()..]));
        }
    }
    for (at, _) in code.match_indices("super::") {
        if code[..at].ends_with("::") {
            continue; // inside a chain already counted
        }
        let mut rest = &code[at..];
        let mut climbs = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = r;
        }
        if climbs >= depth {
            note(names_after(rest));
        }
    }
    found
}

/// The first name of the path `after` (`a::…`), or each top-level name of a group
/// (`{a::x, b, c::{…}}`).
fn names_after(after: &str) -> Vec<&str> {
    let Some(group) = after.strip_prefix('{') else {
        return vec![first_word(after)];
    };
    let body = &group[..closing_brace(after, 0).saturating_sub(1).min(group.len())];
    let mut names = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                names.push(first_word(&body[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    names.push(first_word(&body[start..]));
    names
}

/// The identifier at the start of `s` (after spaces).
fn first_word(s: &str) -> &str {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Module → the modules it imports, and for each import the files that make it.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = library_files(&src);
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut g = Graph::new();
    for (module, paths) in &files {
        let edges = g.entry(module.clone()).or_default();
        for path in paths {
            let rel = path.strip_prefix(&src).unwrap_or(path);
            let parts = rel.components().count();
            let depth = if rel.ends_with("mod.rs") {
                parts - 1
            } else {
                parts
            };
            for to in imports(&code_of(path), depth, &modules) {
                if &to != module {
                    let shown = rel.display().to_string();
                    edges.entry(to).or_default().insert(shown);
                }
            }
        }
    }
    g
}

#[test]
fn the_library_is_read_whole() {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let code = code_of(&lib);
    let not_a_module: Vec<&str> = code
        .lines()
        .map(str::trim)
        .filter(|l| !(l.is_empty() || l.starts_with('#') || l.starts_with("pub mod ")))
        .collect();
    assert!(
        not_a_module.is_empty(),
        "src/lib.rs holds more than module declarations (a re-export there would hide an \
         import): {not_a_module:?}"
    );
    let g = graph();
    // A reader that found nothing would pass every other test.
    for expected in DRIVERS
        .iter()
        .chain(&["broker", "dlq", "rabbitmq", "status", "wire"])
    {
        assert!(
            g.contains_key(*expected),
            "module {expected} not found in src/lib.rs"
        );
    }
    assert!(
        g["controller"].contains_key("reconcile"),
        "the controller's imports were not read: {:?}",
        g["controller"].keys()
    );
    assert!(
        !g.contains_key("fake"),
        "the test fake (declared under #[cfg(test)]) was read as library code"
    );
}

#[test]
fn no_driver_imports_another_and_no_core_module_imports_a_driver() {
    let mut wrong = Vec::new();
    for (from, edges) in graph() {
        for (to, files) in edges {
            if DRIVERS.contains(&to.as_str()) {
                let kind = if DRIVERS.contains(&from.as_str()) {
                    "driver imports driver"
                } else {
                    "core module imports a driver"
                };
                wrong.push(format!("{kind}: {from} -> {to} (in {files:?})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_circle_among_top_level_modules() {
    let g = graph();
    // Depth-first search; a grey module met again closes a circle.
    fn visit<'a>(
        m: &'a str,
        g: &'a Graph,
        state: &mut BTreeMap<&'a str, bool>,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(true) => return None,
            Some(false) => {
                let from = path.iter().position(|p| *p == m).unwrap_or(0);
                let mut circle: Vec<String> = path[from..].iter().map(|s| s.to_string()).collect();
                circle.push(m.to_string());
                return Some(circle);
            }
            None => {}
        }
        state.insert(m, false);
        path.push(m);
        for to in g.get(m).map(|e| e.keys()).into_iter().flatten() {
            if let Some(c) = visit(to, g, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(m, true);
        None
    }
    let mut state = BTreeMap::new();
    for m in g.keys() {
        let mut path = Vec::new();
        if let Some(circle) = visit(m, &g, &mut state, &mut path) {
            let ties: Vec<String> = circle
                .windows(2)
                .map(|w| format!("{} -> {} (in {:?})", w[0], w[1], g[&w[0]][&w[1]]))
                .collect();
            panic!("a circle among top-level modules:\n{}", ties.join("\n"));
        }
    }
}

#[test]
fn every_import_runs_down_the_layers_or_stays_in_its_own() {
    let mut wrong = Vec::new();
    for (from, edges) in graph() {
        let Some(own) = layer_of(&from) else {
            wrong.push(format!("{from} has no layer: add it to LAYERS"));
            continue;
        };
        for (to, files) in edges {
            match layer_of(&to) {
                Some(l) if l <= own => {}
                Some(l) => wrong.push(format!(
                    "{from} ({}) -> {to} ({}) runs up (in {files:?})",
                    LAYERS[own].0, LAYERS[l].0
                )),
                None => wrong.push(format!("{to} has no layer: add it to LAYERS")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}
