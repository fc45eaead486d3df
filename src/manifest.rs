//! Reading resources from manifest files (the standalone driver's input).
//!
//! A path is a file, `-` (standard input) or a directory (its `*.yaml` / `*.yml` files,
//! sorted by name, not recursive; an entry that is not a regular file, or a link that
//! cannot be followed, is an error, not skipped). A read that blocks (a FIFO) is
//! announced on stderr after a second. A text nested too deep is refused before parsing
//! ([`crate::nesting`]). Each file holds one or more YAML documents (`---`); each document is a
//! `RetryPolicy`, a `DeadLetterQueue` or a `Secret` (other kinds are an error, empty
//! documents are skipped). Every error names the file, the document, the resource and
//! the field — unknown fields included, as `kubectl apply --validate=strict` would.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::crd::{DeadLetterQueue, InvalidSpec, RetryPolicy, API_GROUP, API_VERSION};

/// Where an object was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRef {
    /// File path as given (or found in the directory); [`STDIN`] for standard input.
    pub file: PathBuf,
    /// 1-based index of the YAML document in the file.
    pub document: usize,
}

impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.file == Path::new(STDIN) {
            write!(f, "standard input (document {})", self.document)
        } else {
            write!(f, "{} (document {})", self.file.display(), self.document)
        }
    }
}

/// An object and where it came from.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    /// Its origin.
    pub source: SourceRef,
    /// The object.
    pub object: T,
}

/// Everything read from a manifest path.
#[derive(Debug, Clone, Default)]
pub struct Manifests {
    /// RetryPolicies, in file order.
    pub retry_policies: Vec<Loaded<RetryPolicy>>,
    /// DeadLetterQueues, in file order.
    pub dead_letter_queues: Vec<Loaded<DeadLetterQueue>>,
    /// Secrets, in file order.
    pub secrets: Vec<Loaded<Secret>>,
}

/// A manifest that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The path cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The manifests hold no DeadLetterQueue (an empty or truncated file, say).
    #[error("{0}: no DeadLetterQueue in these manifests (empty or truncated file?)")]
    NoDeadLetterQueue(String),
    /// A manifest that is too large or not UTF-8 text.
    #[error("{path}: {reason}")]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A directory without any `*.yaml`/`*.yml` file.
    #[error("{0}: no *.yaml or *.yml files in this directory")]
    Empty(PathBuf),
    /// YAML syntax error (the parser's message, with line and column).
    #[error("{at}: invalid YAML: {message}")]
    Yaml {
        /// Where: the file and the document the parser stopped in.
        at: SourceRef,
        /// Parser message with the field, line and column.
        message: String,
    },
    /// A document that is not an object we know.
    #[error("{at}: {message}")]
    Document {
        /// Where.
        at: SourceRef,
        /// What is wrong.
        message: String,
    },
    /// A field of a resource is wrong (bad type, unknown field, invalid value).
    #[error("{at}: {kind} {name}: {field}: {message}")]
    Field {
        /// Where.
        at: SourceRef,
        /// Resource kind.
        kind: &'static str,
        /// `namespace/name`.
        name: String,
        /// Field path, e.g. `spec.backoff.maxDelay`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Two documents define the same resource.
    #[error("{at}: {kind} {name} is already defined in {first}")]
    Duplicate {
        /// The second definition.
        at: SourceRef,
        /// Resource kind.
        kind: &'static str,
        /// `namespace/name`.
        name: String,
        /// The first definition.
        first: SourceRef,
    },
}

impl ManifestError {
    /// Builds [`ManifestError::Field`] errors for every field of an [`InvalidSpec`]; the
    /// first is returned (the rest are joined into its message).
    pub fn from_invalid(
        source: &SourceRef,
        kind: &'static str,
        name: &str,
        invalid: &InvalidSpec,
    ) -> Self {
        let first = invalid.0.first();
        let mut message = first.map(|e| e.message.clone()).unwrap_or_default();
        for more in invalid.0.iter().skip(1) {
            message.push_str(&format!("; also {}: {}", more.field, more.message));
        }
        ManifestError::Field {
            at: source.clone(),
            kind,
            name: name.to_string(),
            field: first
                .map(|e| e.field.clone())
                .unwrap_or_else(|| "spec".into()),
            message,
        }
    }
}

/// `namespace/name` of an object's metadata (`default` namespace when unset).
pub fn object_key(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        namespace_of(meta),
        meta.name.as_deref().unwrap_or("")
    )
}

/// The object's namespace: `default` when unset or empty (as kubectl does).
pub fn namespace_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
}

/// The path that stands for standard input (`-f -`, as kubectl has it).
pub const STDIN: &str = "-";

/// Lists the manifest files of a path: the file itself (any kind of file: a FIFO or
/// `/dev/stdin` named on its own is read; [`STDIN`] is standard input), or a directory's
/// `*.yaml` and `*.yml` files sorted by name. Subdirectories are not read.
///
/// # Errors
/// [`ManifestError::Io`] when the path cannot be read, [`ManifestError::Empty`] for a
/// directory without manifest files, [`ManifestError::Unreadable`] for a `*.yaml` entry
/// of a directory that is a symbolic link that cannot be followed (a loop, a missing
/// target) or not a regular file (a FIFO, socket or device: reading it may block).
pub fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let io = |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    };
    if path == Path::new(STDIN) {
        return Ok(vec![path.to_path_buf()]);
    }
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io)? {
        let p = entry.map_err(io)?.path();
        let is_yaml = p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e == "yaml" || e == "yml");
        if is_yaml {
            files.push(p);
        }
    }
    files.sort();
    let mut read = Vec::with_capacity(files.len());
    for p in files {
        if directory_entry_is_a_file(&p)? {
            read.push(p);
        }
    }
    let files = read;
    if files.is_empty() {
        return Err(ManifestError::Empty(path.to_path_buf()));
    }
    Ok(files)
}

/// Whether a `*.yaml` entry of a directory is read: yes for a regular file (or a link to
/// one), no for a directory. Anything else is an error rather than a silent skip, so no
/// manifest the user expects applied goes missing without a word.
///
/// # Errors
/// [`ManifestError::Unreadable`] naming the entry and why, with what to do.
fn directory_entry_is_a_file(p: &Path) -> Result<bool, ManifestError> {
    let unreadable = |reason: String| ManifestError::Unreadable {
        path: p.to_path_buf(),
        reason,
    };
    let meta = match std::fs::metadata(p) {
        Ok(meta) => meta,
        Err(e) => {
            let link = std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
            return Err(unreadable(if link {
                format!("a symbolic link that cannot be followed (a loop, or a missing target): {e}; fix the link or remove it")
            } else {
                format!("cannot be read ({e})")
            }));
        }
    };
    if meta.is_dir() {
        return Ok(false);
    }
    if !meta.is_file() {
        return Err(unreadable(format!(
            "not a regular file but {}: reading it could block without end, so a directory's entries must be regular files; move it out of the directory, or name it on its own with -f to read it",
            file_kind(&meta)
        )));
    }
    Ok(true)
}

/// What kind of file `meta` describes, for a message (`a FIFO`, `a socket`, …).
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
    }
    if meta.is_dir() {
        "a directory"
    } else if meta.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// Reads every resource under `paths` (files or directories).
///
/// Resources are checked for YAML syntax, kind, types and unknown fields, but not yet
/// validated semantically (see [`crate::reconcile`]).
///
/// # Errors
/// The first [`ManifestError`] found, naming file, document, resource and field.
pub fn load_paths(paths: &[PathBuf]) -> Result<Manifests, ManifestError> {
    let mut out = Manifests::default();
    let mut seen = std::collections::BTreeSet::new();
    for path in paths {
        for file in manifest_files(path)? {
            // The same file named twice (e.g. `-f dir -f dir/a.yaml`, or `-f - -f -`) is
            // read once.
            let canonical = if file == Path::new(STDIN) {
                file.clone()
            } else {
                std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone())
            };
            if !seen.insert(canonical) {
                continue;
            }
            let text = read_manifest(&file)?;
            load_str(&file, &text, &mut out)?;
        }
    }
    check_duplicates(&out)?;
    Ok(out)
}

/// Largest manifest file read, in bytes (16 MiB): a path to a device or a runaway file
/// gets a clear error instead of exhausting memory.
pub const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;

/// How long a read of a FIFO, a device or standard input may wait before a notice says
/// what it waits for.
const READ_NOTICE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads one manifest file (or standard input for [`STDIN`]) as UTF-8 text, at most
/// [`MAX_MANIFEST_BYTES`], without a leading byte-order mark.
///
/// A regular file is read at once. Anything else (a FIFO, `/dev/stdin`, standard input)
/// can block until something writes to it: it is read on a thread of its own, and when
/// that has not ended after [`READ_NOTICE_AFTER`] a warning says what the command waits
/// for (it still waits: a signal ends it).
fn read_manifest(file: &Path) -> Result<String, ManifestError> {
    let io = |source| ManifestError::Io {
        path: file.to_path_buf(),
        source,
    };
    let stdin = file == Path::new(STDIN);
    let regular = !stdin && std::fs::metadata(file).map_err(io)?.is_file();
    let bytes = if regular {
        read_limited(std::fs::File::open(file).map_err(io)?).map_err(io)?
    } else {
        read_in_background(file, stdin).map_err(io)?
    };
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(ManifestError::Unreadable {
            path: file.to_path_buf(),
            reason: format!("larger than the limit of {MAX_MANIFEST_BYTES} bytes"),
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| ManifestError::Unreadable {
        path: file.to_path_buf(),
        reason: format!("not UTF-8 text: {e}"),
    })?;
    // A UTF-8 byte-order mark (some editors write one) is not part of the YAML.
    Ok(text
        .strip_prefix('\u{feff}')
        .map(str::to_string)
        .unwrap_or(text))
}

/// At most [`MAX_MANIFEST_BYTES`] + 1 bytes of `reader` (one more tells it is too large).
fn read_limited(reader: impl std::io::Read) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    reader
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads a FIFO, a device or standard input on a thread of its own, warning once when it
/// is still blocked after [`READ_NOTICE_AFTER`]. A thread left blocked when the command
/// gives up (a signal) ends with the process.
fn read_in_background(file: &Path, stdin: bool) -> std::io::Result<Vec<u8>> {
    use std::io::IsTerminal;
    let what = if stdin {
        "standard input".to_string()
    } else {
        format!("{:?}", file.display().to_string())
    };
    if stdin && std::io::stdin().is_terminal() {
        tracing::warn!(
            "reading the manifests from standard input (a terminal): end them with Ctrl-D"
        );
    }
    let path = file.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let read = if stdin {
            read_limited(std::io::stdin().lock())
        } else {
            std::fs::File::open(&path).and_then(read_limited)
        };
        let _ = tx.send(read);
    });
    let gone = || std::io::Error::other("the reading thread ended without a result");
    match rx.recv_timeout(READ_NOTICE_AFTER) {
        Ok(read) => read,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            let kind = if stdin {
                String::new()
            } else {
                std::fs::metadata(file).map_or(String::new(), |m| format!(" ({})", file_kind(&m)))
            };
            tracing::warn!(
                "waiting for {what}{kind} to be written: its read blocks until a writer opens it and closes it (Ctrl-C stops)"
            );
            rx.recv().map_err(|_| gone())?
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(gone()),
    }
}

/// Reads the documents of one file's text into `out`.
///
/// # Errors
/// As [`load_paths`]; a text with collections nested deeper than
/// [`crate::nesting::MAX_DEPTH`] is refused before it is parsed
/// ([`ManifestError::Document`] with the line and column).
pub fn load_str(file: &Path, text: &str, out: &mut Manifests) -> Result<(), ManifestError> {
    // Before serde_yaml_ng: its time grows with the square of the flow nesting depth.
    if let Some(deep) = crate::nesting::find_too_deep(text, crate::nesting::MAX_DEPTH) {
        return Err(ManifestError::Document {
            at: SourceRef {
                file: file.to_path_buf(),
                document: deep.document,
            },
            message: format!(
                "nested more than {} levels deep (sequences and mappings, at line {} column {}); not read further: no resource of this operator nests deeper than about 10 levels, so look for brackets that are never closed or a generator gone wrong",
                crate::nesting::MAX_DEPTH,
                deep.line,
                deep.column
            ),
        });
    }
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let source = SourceRef {
            file: file.to_path_buf(),
            document: i + 1,
        };
        let value =
            serde_yaml_ng::Value::deserialize(doc).map_err(|e| value_error(&source, text, e))?;
        if value.is_null() {
            continue;
        }
        let doc_err = |message: String| ManifestError::Document {
            at: source.clone(),
            message,
        };
        let mapping = value
            .as_mapping()
            .ok_or_else(|| doc_err("expected a Kubernetes object (a YAML mapping)".into()))?;
        let field = |k: &str| {
            mapping
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        for key in ["apiVersion", "kind"] {
            if mapping.get(key).is_some_and(|v| !v.is_string()) {
                return Err(doc_err(format!("{key} must be a string")));
            }
        }
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        let ours = format!("{API_GROUP}/{API_VERSION}");
        match (api_version.as_str(), kind.as_str()) {
            (v, "RetryPolicy") if v == ours => {
                let object = typed::<RetryPolicy>(&source, "RetryPolicy", value)?;
                out.retry_policies.push(Loaded { source, object });
            }
            (v, "DeadLetterQueue") if v == ours => {
                let object = typed::<DeadLetterQueue>(&source, "DeadLetterQueue", value)?;
                out.dead_letter_queues.push(Loaded { source, object });
            }
            ("v1", "Secret") => {
                let object = typed::<Secret>(&source, "Secret", value)?;
                out.secrets.push(Loaded { source, object });
            }
            ("", _) => return Err(doc_err("missing apiVersion".into())),
            (_, "") => return Err(doc_err("missing kind".into())),
            (v, k) => {
                return Err(doc_err(format!(
                    "unsupported object {v}/{k}; expected {ours} RetryPolicy or DeadLetterQueue, or v1 Secret"
                )))
            }
        }
    }
    Ok(())
}

/// The error for a document that does not even read as a YAML value: a syntax error, or
/// an integer beyond 64 bits (serde_yaml_ng says "invalid type: integer `…` as u128,
/// expected any YAML value"), which is named as too large or too small, on the resource
/// and field when the document says which, and never with its value in a Secret.
fn value_error(source: &SourceRef, text: &str, e: serde_yaml_ng::Error) -> ManifestError {
    let message = e.to_string();
    let Some(sign) = [("+", " as u128, "), ("-", " as i128, ")]
        .into_iter()
        .find_map(|(sign, marker)| message.contains(marker).then_some(sign))
    else {
        return ManifestError::Yaml {
            at: source.clone(),
            message,
        };
    };
    let field = message
        .split_once(": invalid type: integer")
        .map_or("", |(path, _)| path)
        .to_string();
    let place = e.location().map_or_else(String::new, |l| {
        format!(" (at line {} column {})", l.line(), l.column())
    });
    let (kind, name) = document_head(text, source.document);
    let (what, limit) = if sign == "+" {
        (
            "too large",
            format!("the largest integer a manifest holds is {}", u64::MAX),
        )
    } else {
        (
            "too small",
            format!("the smallest integer a manifest holds is {}", i64::MIN),
        )
    };
    let message = if kind == Some("Secret") {
        format!(
            "an integer is {what}{place}: {limit}; quote it to make it a string, as Secret values must be (value not shown: Secret values are never printed)"
        )
    } else {
        let digits = message.split('`').nth(1).unwrap_or("?");
        format!(
            "integer {digits} is {what}{place}: {limit}; give a value within the field's range (the resource's reference in README.md)"
        )
    };
    match kind {
        Some(kind) if !field.is_empty() => ManifestError::Field {
            at: source.clone(),
            kind,
            name,
            field,
            message,
        },
        _ if field.is_empty() => ManifestError::Document {
            at: source.clone(),
            message,
        },
        _ => ManifestError::Document {
            at: source.clone(),
            message: format!("{field}: {message}"),
        },
    }
}

/// The kind (one of ours) and `namespace/name` of document `document` (1-based) of
/// `text`, read leniently (other fields ignored unread), for an error message.
fn document_head(text: &str, document: usize) -> (Option<&'static str>, String) {
    #[derive(Deserialize)]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
    }
    #[derive(Deserialize)]
    struct Head {
        kind: Option<String>,
        metadata: Option<Meta>,
    }
    let head = serde_yaml_ng::Deserializer::from_str(text)
        .nth(document.saturating_sub(1))
        .and_then(|doc| Head::deserialize(doc).ok());
    let Some(head) = head else {
        return (None, String::new());
    };
    let kind = ["RetryPolicy", "DeadLetterQueue", "Secret"]
        .into_iter()
        .find(|k| head.kind.as_deref() == Some(*k));
    let (namespace, name) = head
        .metadata
        .map_or((None, None), |m| (m.namespace, m.name));
    (kind, display_key(namespace.as_deref(), name.as_deref()))
}

/// `namespace/name` of a document for messages, before it is typed: `default` for no (or
/// an empty) namespace, `<unnamed>` for no name.
fn display_key(namespace: Option<&str>, name: Option<&str>) -> String {
    format!(
        "{}/{}",
        namespace.filter(|n| !n.is_empty()).unwrap_or("default"),
        name.unwrap_or("<unnamed>")
    )
}

/// A `metadata.name` or `metadata.namespace` the Kubernetes API server would refuse
/// (Kubernetes API conventions, "Object names and IDs": a name is an RFC 1123 subdomain of
/// at most 253 characters, a namespace an RFC 1123 label of at most 63), as
/// `(field, message)`. The standalone commands take the same names as a cluster: a
/// DeadLetterQueue's `namespace/name` is its identity on the broker (its ownership
/// records), which `a/b` + `c` and `a` + `b/c` would otherwise share.
fn invalid_object_name(value: &serde_yaml_ng::Value) -> Option<(&'static str, String)> {
    let meta = value.get("metadata")?;
    let text = |k: &str| meta.get(k).and_then(serde_yaml_ng::Value::as_str);
    if let Some(name) = text("name") {
        if !crate::crd::is_rfc1123_subdomain(name) {
            return Some((
                "metadata.name",
                format!("{name:?} is not a valid name: lower-case letters, digits, '-' and '.', beginning and ending with a letter or digit, at most 253 characters (RFC 1123 subdomain, as the Kubernetes API server requires)"),
            ));
        }
    }
    if let Some(namespace) = text("namespace") {
        if !crate::crd::is_rfc1123_label(namespace) {
            return Some((
                "metadata.namespace",
                format!("{namespace:?} is not a valid namespace: lower-case letters, digits and '-', beginning and ending with a letter or digit, at most 63 characters (RFC 1123 label, as the Kubernetes API server requires)"),
            ));
        }
    }
    None
}

/// Name of a document for messages, read leniently before typing.
fn raw_name(value: &serde_yaml_ng::Value) -> String {
    let meta = value.get("metadata");
    let get = |k: &str| meta.and_then(|m| m.get(k)).and_then(|v| v.as_str());
    display_key(get("namespace"), get("name"))
}

/// Deserialises a document into `T`, reporting the failing field's path and any unknown
/// field.
fn typed<T: DeserializeOwned>(
    source: &SourceRef,
    kind: &'static str,
    value: serde_yaml_ng::Value,
) -> Result<T, ManifestError> {
    let name = raw_name(&value);
    let field_err = |field: String, message: String| ManifestError::Field {
        at: source.clone(),
        kind,
        name: name.clone(),
        field,
        message,
    };
    if let Some((field, message)) = invalid_object_name(&value) {
        return Err(field_err(field.into(), message));
    }
    let mut unknown: Vec<String> = Vec::new();
    let result: Result<T, _> = {
        let mut record = |path: serde_ignored::Path| {
            let p = path.to_string();
            if p != "apiVersion" && p != "kind" {
                unknown.push(p);
            }
        };
        let de = serde_ignored::Deserializer::new(value, &mut record);
        serde_path_to_error::deserialize(de)
    };
    let object = result.map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { kind.to_string() } else { path };
        let message = if kind == "Secret" {
            // Serde quotes the offending value, and a Secret's values are credentials.
            "invalid value (not shown: Secret values are never printed); `stringData` takes strings, `data` takes base64 strings".to_string()
        } else {
            e.into_inner().to_string()
        };
        field_err(field, message)
    })?;
    if let Some(first) = unknown.first() {
        return Err(field_err(
            first.clone(),
            "unknown field (not in the resource's schema)".into(),
        ));
    }
    if name.ends_with("/<unnamed>") {
        return Err(field_err("metadata.name".into(), "is required".into()));
    }
    Ok(object)
}

fn check_duplicates(m: &Manifests) -> Result<(), ManifestError> {
    fn check<T>(
        items: &[Loaded<T>],
        kind: &'static str,
        meta: impl Fn(&T) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Result<(), ManifestError> {
        let mut seen: BTreeMap<String, &SourceRef> = BTreeMap::new();
        for item in items {
            let key = object_key(meta(&item.object));
            if let Some(first) = seen.get(&key) {
                return Err(ManifestError::Duplicate {
                    at: item.source.clone(),
                    kind,
                    name: key,
                    first: (*first).clone(),
                });
            }
            seen.insert(key, &item.source);
        }
        Ok(())
    }
    check(&m.retry_policies, "RetryPolicy", |o| &o.metadata)?;
    check(&m.dead_letter_queues, "DeadLetterQueue", |o| &o.metadata)?;
    check(&m.secrets, "Secret", |o| &o.metadata)
}

impl Manifests {
    /// The RetryPolicy `name` in `namespace`.
    pub fn retry_policy(&self, namespace: &str, name: &str) -> Option<&Loaded<RetryPolicy>> {
        self.retry_policies
            .iter()
            .find(|p| object_key(&p.object.metadata) == format!("{namespace}/{name}"))
    }

    /// The Secret `name` in `namespace`.
    pub fn secret(&self, namespace: &str, name: &str) -> Option<&Loaded<Secret>> {
        self.secrets
            .iter()
            .find(|s| object_key(&s.object.metadata) == format!("{namespace}/{name}"))
    }
}

/// The data of a Secret, with `stringData` merged over `data` (as the API server does).
pub fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in secret.string_data.iter().flatten() {
        out.insert(k.clone(), v.as_bytes().to_vec());
    }
    out
}
