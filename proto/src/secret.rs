//! Session secrets: drawn, checked and hashed at the edge, so that the log, snapshots and memory
//! hold only a [`SecretHash`] (SHA-256) and no secret ever reaches the state machine.
//!
//! The client library draws a secret per session ([`SessionSecret::generate`]) and presents it
//! on every call; a server that gets a `CreateSession` without one draws it and returns it once.
//! `Debug` never prints the bytes.

use std::fmt;

use picket_core::locks::{SecretHash, SECRET_HASH_LEN};
use ring::digest;

use crate::error::ConvertError;

/// Fewest bytes a client-chosen secret may have (128 bits).
pub const SESSION_SECRET_LEN_MIN: usize = 16;
/// Most bytes a secret may have.
pub const SESSION_SECRET_LEN_MAX: usize = 64;
/// Bytes of a secret drawn by [`SessionSecret::generate`] (256 bits).
pub const SESSION_SECRET_LEN_GENERATED: usize = 32;

/// A session's secret: 16..=64 bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionSecret(Vec<u8>);

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionSecret(<{} bytes, redacted>)", self.0.len())
    }
}

impl SessionSecret {
    /// A fresh secret of [`SESSION_SECRET_LEN_GENERATED`] random bytes: from the operating
    /// system, or inside the simulator from its seeded RNG (so runs replay).
    pub fn generate() -> SessionSecret {
        SessionSecret(random_bytes())
    }

    /// The secret sent in request field `field`: empty is "missing", else 16..=64 bytes.
    pub fn from_request(bytes: &[u8], field: &str) -> Result<SessionSecret, ConvertError> {
        if bytes.is_empty() {
            return Err(ConvertError::new(
                field,
                "required: the session's secret (the client library sends it; a session \
                 opened by hand prints it once)",
            ));
        }
        Self::optional(bytes, field).map(|secret| secret.expect("not empty"))
    }

    /// As [`SessionSecret::from_request`], where an empty field means "none".
    pub fn optional(bytes: &[u8], field: &str) -> Result<Option<SessionSecret>, ConvertError> {
        match bytes.len() {
            0 => Ok(None),
            SESSION_SECRET_LEN_MIN..=SESSION_SECRET_LEN_MAX => {
                Ok(Some(SessionSecret(bytes.to_vec())))
            }
            len => Err(ConvertError::new(
                field,
                format!(
                    "{len} bytes: a session secret has {SESSION_SECRET_LEN_MIN}..=\
                     {SESSION_SECRET_LEN_MAX} random bytes"
                ),
            )),
        }
    }

    /// The secret written as lowercase hex (how `picketctl` shows and takes it).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A secret written as hex (whitespace around it ignored).
    pub fn from_hex(text: &str) -> Result<SessionSecret, ConvertError> {
        let text = text.trim();
        let bad = || ConvertError::new("session secret", "must be hex digits (two per byte)");
        if !text.len().is_multiple_of(2) {
            return Err(bad());
        }
        let bytes = (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2)
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(bad)?;
        Self::from_request(&bytes, "session secret")
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The SHA-256 hash the state machine keeps.
    pub fn hash(&self) -> SecretHash {
        let digest = digest::digest(&digest::SHA256, &self.0);
        let mut hash = [0; SECRET_HASH_LEN];
        hash.copy_from_slice(digest.as_ref());
        SecretHash(hash)
    }
}

#[cfg(not(madsim))]
fn random_bytes() -> Vec<u8> {
    use ring::rand::{SecureRandom, SystemRandom};
    let mut bytes = vec![0; SESSION_SECRET_LEN_GENERATED];
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("the operating system's random source failed");
    bytes
}

#[cfg(madsim)]
fn random_bytes() -> Vec<u8> {
    (0..SESSION_SECRET_LEN_GENERATED)
        .map(|_| madsim::rand::random::<u8>())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_differ_and_hash_to_sha256() {
        let a = SessionSecret::generate();
        let b = SessionSecret::generate();
        assert_eq!(a.as_bytes().len(), SESSION_SECRET_LEN_GENERATED);
        assert_ne!(a, b);
        assert_ne!(a.hash(), b.hash());
        // SHA-256 of 16 zero bytes.
        let zeros = SessionSecret::from_request(&[0; 16], "f").unwrap();
        assert_eq!(SessionSecret::from_hex(&zeros.to_hex()).unwrap(), zeros);
        let hex: String = zeros.hash().0.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "374708fff7719dd5979ec875d56cd2286f6d3cf7ec317a3b25632aab28ec37bb"
        );
    }

    #[test]
    fn a_secret_is_required_and_bounded_and_never_printed() {
        let missing = SessionSecret::from_request(&[], "acquire.session_secret").unwrap_err();
        assert_eq!(missing.field, "acquire.session_secret");
        let short = SessionSecret::from_request(&[1; 15], "acquire.session_secret").unwrap_err();
        assert!(short.rule.contains("15 bytes"), "{short}");
        assert!(SessionSecret::optional(&[1; 65], "f").is_err());
        assert_eq!(SessionSecret::optional(&[], "f"), Ok(None));
        let secret = SessionSecret::from_request(&[0xab; 64], "f").unwrap();
        assert_eq!(format!("{secret:?}"), "SessionSecret(<64 bytes, redacted>)");
        assert!(SessionSecret::from_hex("abc").is_err());
        assert!(SessionSecret::from_hex("zz").is_err());
    }
}
