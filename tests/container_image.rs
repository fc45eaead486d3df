//! The container image's build context holds every file the binary reads at compile time.
//!
//! No container engine runs in CI, so the `Dockerfile` is never built there: this test
//! reads `.dockerignore` (which top-level entries go into the build context) and the
//! `Dockerfile`'s build-stage `COPY` lines, and checks that every file an
//! `include_str!`/`include_bytes!` in `src/` names, and askama's `templates/` directory
//! (its default, <https://askama.readthedocs.io/en/stable/configuration.html>), is both
//! let into the context and copied into the build stage. (An image once failed to build
//! because `templates/` was in neither.)

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The top-level entries `.dockerignore` lets into the build context: it ignores
/// everything (`*`) and lets back `!NAME` lines.
fn let_in() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(".dockerignore")).expect(".dockerignore");
    assert!(
        text.lines().any(|l| l.trim() == "*"),
        ".dockerignore no longer starts from '*': update this test"
    );
    text.lines()
        .filter_map(|l| l.trim().strip_prefix('!'))
        .map(|p| p.trim_end_matches('/').to_string())
        .collect()
}

/// The sources of the `COPY` lines of the `Dockerfile`'s stages that build (not those
/// copying from another stage).
fn copied() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("COPY "))
        .filter(|args| !args.starts_with("--from"))
        .flat_map(|args| {
            let words: Vec<&str> = args.split_whitespace().collect();
            let sources = &words[..words.len().saturating_sub(1)];
            sources
                .iter()
                .map(|s| s.trim_end_matches('/').to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level entry of the repository holding `path` (resolved, `..` removed).
fn top_level(path: &Path) -> String {
    let mut parts: Vec<Component> = Vec::new();
    for c in path
        .strip_prefix(root())
        .expect("inside the repository")
        .components()
    {
        match c {
            Component::ParentDir => {
                parts.pop();
            }
            Component::CurDir => {}
            other => parts.push(other),
        }
    }
    parts
        .first()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .expect("a path below the root")
}

/// The top-level entries the crate reads at compile time: those of `include_str!` and
/// `include_bytes!` paths, and `templates` when a `#[template(...)]` is used.
fn read_at_compile_time() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut needed = BTreeSet::from(["src".to_string()]);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("source");
        for macro_name in ["include_str!(\"", "include_bytes!(\""] {
            for (i, m) in text.match_indices(macro_name) {
                let rest = &text[i + m.len()..];
                let relative = rest.split('"').next().expect("a closing quote");
                let dir = file.parent().expect("a directory");
                needed.insert(top_level(&dir.join(relative)));
            }
        }
        if text.contains("#[template(") {
            needed.insert("templates".to_string());
        }
    }
    needed
}

#[test]
fn the_image_build_context_holds_what_the_binary_reads_at_compile_time() {
    let needed = read_at_compile_time();
    assert!(
        needed.contains("templates"),
        "the console's templates are no longer read at compile time: update this test"
    );
    let (let_in, copied) = (let_in(), copied());
    for entry in &needed {
        assert!(
            let_in.contains(entry),
            "{entry}/ is read at compile time but .dockerignore keeps it out of the build context ({let_in:?})"
        );
        assert!(
            copied.contains(entry),
            "{entry}/ is read at compile time but the Dockerfile does not COPY it ({copied:?})"
        );
    }
}
