//! The keys the operator derives from a Redis source (docs/REDIS.md, "Keys"): every key it
//! owns shares the source's hash slot, so each move between them is one script on one
//! server, in a Redis Cluster too.
//!
//! Rule (Redis Cluster specification, "Hash tags"): a key whose name holds a `{…}` with at
//! least one character between the first `{` and the next `}` hashes only that part. A
//! source that has such a tag keeps it, and its derived keys are `<source>:<suffix>`; a
//! source without one is put in braces, `{<source>}:<suffix>`, which hashes exactly as the
//! source does. A source with a `}` but no tag cannot be tagged this way (the tag would
//! stop at its `}`) and is refused.

use std::fmt;

/// The suffixes of the derived keys, after the hash-tagged prefix.
const RETRY_SET: &str = "dlq:retry";
const RETRY_ENTRIES: &str = "dlq:retry-entries";
const DEAD_LETTERS: &str = "dlq:dead";
const CLAIMED: &str = "dlq:claimed";
const SEEN: &str = "dlq:seen";
const OWNER: &str = "dlq:owner";
const FAILURES: &str = "dlq:failures";
const PROCESSING: &str = "processing";

/// A source key that cannot be given derived keys in its hash slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key is empty.
    #[error("the key is empty; name the stream or list the consumers read")]
    Empty,
    /// The key has a `}` but no hash tag before it.
    #[error(
        "the key {key:?} holds '}}' without a hash tag ({{…}}) before it, so the operator's keys cannot share its hash slot; rename it or give it a hash tag, e.g. \"{{orders}}:in\""
    )]
    Untaggable {
        /// The key as given.
        key: String,
    },
}

/// The hash tag of `key` (the part hashed by Redis Cluster), or `None` when the whole key
/// is hashed: the characters between the first `{` and the next `}`, if there is at least
/// one. Redis Cluster specification, "Hash tags".
pub fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// The keys of one Redis source, all in the source's hash slot.
#[derive(Clone, PartialEq, Eq)]
pub struct Keys {
    source: String,
    prefix: String,
    dead_letters: String,
    dead_letters_named: bool,
    processing: String,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keys")
            .field("source", &self.source)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// The keys of source `source` (a stream or a work list). `dead_letters` names the
    /// dead-letter key (`spec.deadLetter.queue`) when given: it must share the source's
    /// hash slot; `<prefix>:dlq:dead` otherwise. `processing` names the work list's
    /// processing list when given; `<prefix>:processing` otherwise.
    ///
    /// # Errors
    /// [`KeyError`] for an empty source or one that cannot be tagged; a dead-letter or
    /// processing key in another slot is refused by [`Keys::check_same_slot`].
    pub fn new(
        source: &str,
        dead_letters: Option<&str>,
        processing: Option<&str>,
    ) -> Result<Keys, KeyError> {
        if source.is_empty() {
            return Err(KeyError::Empty);
        }
        let prefix = match hash_tag(source) {
            Some(_) => source.to_string(),
            None if source.contains('}') => {
                return Err(KeyError::Untaggable {
                    key: source.to_string(),
                })
            }
            None => format!("{{{source}}}"),
        };
        let derived = |suffix: &str| format!("{prefix}:{suffix}");
        Ok(Keys {
            source: source.to_string(),
            dead_letters: dead_letters.map_or_else(|| derived(DEAD_LETTERS), str::to_string),
            dead_letters_named: dead_letters.is_some(),
            processing: processing.map_or_else(|| derived(PROCESSING), str::to_string),
            prefix,
        })
    }

    /// `Ok` when `key` hashes to the source's slot (same hash tag, or the source's name in
    /// braces); otherwise the reason, naming both keys and what to do.
    ///
    /// # Errors
    /// A message for the field that names `key`.
    pub fn check_same_slot(&self, key: &str) -> Result<(), String> {
        if slot_part(key) == slot_part(&self.source) {
            return Ok(());
        }
        Err(format!(
            "{key:?} is not in the hash slot of {:?}: the operator moves entries between them in one script, so both must hash alike; name it with the same hash tag, e.g. \"{}:dead\"",
            self.source, self.prefix
        ))
    }

    /// The source key (stream or work list).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The prefix every derived key starts with (`{source}` or the tagged source).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Sorted set of the entries waiting for a retry, scored by due time (ms since the
    /// epoch, server clock).
    pub fn retry_set(&self) -> String {
        format!("{}:{RETRY_SET}", self.prefix)
    }

    /// Hash of the waiting entries' contents, by the retry set's member.
    pub fn retry_entries(&self) -> String {
        format!("{}:{RETRY_ENTRIES}", self.prefix)
    }

    /// The dead-letter stream (stream layout) or list (list layout).
    pub fn dead_letters(&self) -> &str {
        &self.dead_letters
    }

    /// Whether the dead-letter key was named (`spec.deadLetter.queue`) rather than derived.
    pub fn dead_letters_named(&self) -> bool {
        self.dead_letters_named
    }

    /// The keys the operator derives for itself (every one but the source and the
    /// dead-letter key): a named dead-letter key must be none of them.
    pub fn own(&self) -> Vec<String> {
        vec![
            self.retry_set(),
            self.retry_entries(),
            self.owner(),
            self.claimed(),
            self.seen(),
            self.failures(),
            self.processing.clone(),
        ]
    }

    /// The work list's processing list (list layout).
    pub fn processing(&self) -> &str {
        &self.processing
    }

    /// The list the router holds work-list entries in while it decides (list layout).
    pub fn claimed(&self) -> String {
        format!("{}:{CLAIMED}", self.prefix)
    }

    /// Hash of when the router first saw each processing-list entry (list layout).
    pub fn seen(&self) -> String {
        format!("{}:{SEEN}", self.prefix)
    }

    /// Hash recording which resource owns these keys (docs/REDIS.md, "Ownership").
    pub fn owner(&self) -> String {
        format!("{}:{OWNER}", self.prefix)
    }

    /// The optional stream a consumer may name its error class in.
    pub fn failures(&self) -> String {
        format!("{}:{FAILURES}", self.prefix)
    }
}

/// What Redis Cluster hashes of `key`: its hash tag, or the whole key.
fn slot_part(key: &str) -> &str {
    hash_tag(key).unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hash_tags_follow_the_cluster_specification() {
        assert_eq!(hash_tag("{user1000}.following"), Some("user1000"));
        assert_eq!(hash_tag("foo{}{bar}"), None);
        assert_eq!(hash_tag("foo{{bar}}zap"), Some("{bar"));
        assert_eq!(hash_tag("foo{bar}{zap}"), Some("bar"));
        assert_eq!(hash_tag("orders"), None);
    }

    #[test]
    fn an_untagged_source_is_put_in_braces() {
        let k = Keys::new("orders", None, None).expect("keys");
        assert_eq!(k.retry_set(), "{orders}:dlq:retry");
        assert_eq!(k.dead_letters(), "{orders}:dlq:dead");
        assert_eq!(k.processing(), "{orders}:processing");
        assert_eq!(hash_tag(&k.retry_set()), Some("orders"));
    }

    #[test]
    fn a_tagged_source_keeps_its_tag() {
        let k = Keys::new("{shop}:orders", None, None).expect("keys");
        assert_eq!(k.retry_set(), "{shop}:orders:dlq:retry");
        assert_eq!(hash_tag(&k.owner()), Some("shop"));
    }

    #[test]
    fn a_brace_without_a_tag_is_refused() {
        assert_eq!(
            Keys::new("a}b", None, None),
            Err(KeyError::Untaggable { key: "a}b".into() })
        );
        assert_eq!(Keys::new("", None, None), Err(KeyError::Empty));
        // An empty tag hashes the whole key, which then holds a '}'.
        assert!(Keys::new("x{}y", None, None).is_err());
    }

    #[test]
    fn named_keys_must_share_the_slot() {
        let k = Keys::new("orders", Some("orders-dlq"), None).expect("keys");
        let e = k.check_same_slot("orders-dlq").expect_err("other slot");
        assert!(e.contains("{orders}:dead"), "{e}");
        assert!(k.check_same_slot("{orders}:dead").is_ok());
        let tagged = Keys::new("{shop}:orders", None, None).expect("keys");
        assert!(tagged.check_same_slot("{shop}:dead").is_ok());
        assert!(tagged.check_same_slot("shop").is_ok());
    }

    proptest! {
        /// Every derived key hashes as the source does.
        #[test]
        fn derived_keys_share_the_source_slot(source in "[a-z{}:.]{1,12}") {
            if let Ok(k) = Keys::new(&source, None, None) {
                let want = slot_part(&source);
                for key in [k.retry_set(), k.retry_entries(), k.claimed(), k.seen(), k.owner(), k.failures()] {
                    prop_assert_eq!(slot_part(&key), want, "{}", key);
                }
                prop_assert_eq!(slot_part(k.dead_letters()), want);
                prop_assert_eq!(slot_part(k.processing()), want);
            }
        }
    }
}
