//! Recovery's verdicts (damaged data starts amnesiac; anything else refuses to start) and the
//! boot record under `<data>/boot/hardstate`.

use std::path::{Path, PathBuf};

use picket_proto::DecodeError;
use picket_storage::Error as StorageError;

use super::StoreError;

pub(super) enum Recovery {
    /// The data is damaged: start with the durable state lost.
    Corrupt(String),
    /// Anything else (an IO error, a bad configuration): refuse to start.
    Fatal(StoreError),
}

impl From<StorageError> for Recovery {
    fn from(error: StorageError) -> Recovery {
        match error {
            StorageError::Corruption { .. } => Recovery::Corrupt(error.to_string()),
            other => Recovery::Fatal(other.into()),
        }
    }
}

pub(super) fn decoded(what: &str, error: &DecodeError) -> Recovery {
    Recovery::Corrupt(format!("{what} does not decode: {error}"))
}

pub(super) fn generation_dir(data_dir: &Path, generation: u64) -> PathBuf {
    data_dir.join(format!("replica-{generation}"))
}

pub(super) fn encode_boot(boot: u64, generation: u64) -> Vec<u8> {
    let mut out = boot.to_le_bytes().to_vec();
    out.extend_from_slice(&generation.to_le_bytes());
    out
}

pub(super) fn decode_boot(bytes: &[u8], data_dir: &Path) -> Result<(u64, u64), StoreError> {
    let bad = || StoreError::BadBootRecord {
        path: data_dir.join("boot"),
        len: bytes.len(),
    };
    let boot = bytes.get(0..8).ok_or_else(bad)?;
    let generation = bytes.get(8..16).ok_or_else(bad)?;
    if bytes.len() != 16 {
        return Err(bad());
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    Ok((word(boot), word(generation).max(1)))
}
