//! Validation of namespace names, class names, keys and key prefixes.
//!
//! Names are validated when a command is applied, so every replica refuses the same bad name with
//! the same error. A bad name changes nothing but the revision.

use thiserror::Error;

/// Longest namespace or class name, in bytes (`[a-z0-9][a-z0-9-]{0,62}`).
pub const NAME_LEN_MAX: usize = 63;
/// Longest key (and key prefix), in bytes of UTF-8.
pub const KEY_LEN_MAX: usize = 512;

/// A name or key that breaks a naming rule. Each variant names the rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum NameError {
    #[error("{what} is empty: it must match [a-z0-9][a-z0-9-]{{0,62}}")]
    NameEmpty { what: &'static str },
    #[error("{what} `{name}` is {len} bytes long: at most 63 allowed ([a-z0-9][a-z0-9-]{{0,62}})")]
    NameTooLong {
        what: &'static str,
        name: String,
        len: usize,
    },
    #[error(
        "{what} `{name}` has {ch:?} at byte {index}: it must match [a-z0-9][a-z0-9-]{{0,62}} \
         (lowercase ASCII letters, digits, and `-` after the first character)"
    )]
    NameBadChar {
        what: &'static str,
        name: String,
        ch: char,
        index: usize,
    },
    #[error("key is empty: a key is 1..=512 bytes of UTF-8")]
    KeyEmpty,
    #[error("key is {len} bytes long: a key is 1..=512 bytes of UTF-8")]
    KeyTooLong { len: usize },
    #[error("key prefix is {len} bytes long: a class prefix is 0..=512 bytes of UTF-8")]
    PrefixTooLong { len: usize },
}

/// Checks a namespace name: `[a-z0-9][a-z0-9-]{0,62}`.
pub fn validate_namespace(name: &str) -> Result<(), NameError> {
    validate_name("namespace", name)
}

/// Checks a class name: the same rule as a namespace name.
pub fn validate_class_name(name: &str) -> Result<(), NameError> {
    validate_name("class name", name)
}

fn validate_name(what: &'static str, name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::NameEmpty { what });
    }
    if name.len() > NAME_LEN_MAX {
        return Err(NameError::NameTooLong {
            what,
            name: name.to_owned(),
            len: name.len(),
        });
    }
    for (index, ch) in name.char_indices() {
        let ok = ch.is_ascii_lowercase() || ch.is_ascii_digit() || (ch == '-' && index > 0);
        if !ok {
            return Err(NameError::NameBadChar {
                what,
                name: name.to_owned(),
                ch,
                index,
            });
        }
    }
    Ok(())
}

/// Checks a key: 1..=512 bytes (a `&str` is UTF-8 by construction).
pub fn validate_key(key: &str) -> Result<(), NameError> {
    if key.is_empty() {
        return Err(NameError::KeyEmpty);
    }
    if key.len() > KEY_LEN_MAX {
        return Err(NameError::KeyTooLong { len: key.len() });
    }
    Ok(())
}

/// Checks a class's key prefix: 0..=512 bytes (the empty prefix is the namespace's default class).
pub fn validate_prefix(prefix: &str) -> Result<(), NameError> {
    if prefix.len() > KEY_LEN_MAX {
        return Err(NameError::PrefixTooLong { len: prefix.len() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_rule() {
        assert_eq!(validate_namespace("orders"), Ok(()));
        assert_eq!(validate_namespace("a"), Ok(()));
        assert_eq!(validate_namespace("0-a-9"), Ok(()));
        assert_eq!(validate_namespace(&"a".repeat(63)), Ok(()));
        assert!(matches!(
            validate_namespace(""),
            Err(NameError::NameEmpty { .. })
        ));
        assert!(matches!(
            validate_namespace(&"a".repeat(64)),
            Err(NameError::NameTooLong { len: 64, .. })
        ));
        assert!(matches!(
            validate_namespace("-a"),
            Err(NameError::NameBadChar {
                ch: '-',
                index: 0,
                ..
            })
        ));
        assert!(matches!(
            validate_namespace("Orders"),
            Err(NameError::NameBadChar { ch: 'O', .. })
        ));
        assert!(matches!(
            validate_namespace("a_b"),
            Err(NameError::NameBadChar {
                ch: '_',
                index: 1,
                ..
            })
        ));
        assert!(matches!(
            validate_namespace("é"),
            Err(NameError::NameBadChar { ch: 'é', .. })
        ));
    }

    #[test]
    fn key_rule() {
        assert_eq!(validate_key("k"), Ok(()));
        assert_eq!(validate_key("ключ/ü"), Ok(()));
        assert_eq!(validate_key(&"x".repeat(512)), Ok(()));
        assert_eq!(validate_key(""), Err(NameError::KeyEmpty));
        assert_eq!(
            validate_key(&"x".repeat(513)),
            Err(NameError::KeyTooLong { len: 513 })
        );
        assert_eq!(validate_prefix(""), Ok(()));
        assert_eq!(
            validate_prefix(&"x".repeat(513)),
            Err(NameError::PrefixTooLong { len: 513 })
        );
        let message = validate_namespace("A").unwrap_err().to_string();
        assert!(message.contains("[a-z0-9][a-z0-9-]{0,62}"), "{message}");
    }
}
