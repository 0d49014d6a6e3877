//! proto <-> core conversions.
//!
//! Two kinds of input are told apart:
//! - **Records** (commands, replies, snapshots, events, ... as found in the log, in snapshots or
//!   in peer messages): decoded *structurally* and losslessly. Required messages and oneofs must
//!   be present and enum values known, but names are not re-validated: the state machine refuses
//!   a bad name deterministically when it applies the command, and a record must decode to
//!   exactly the value that was encoded (`core -> proto -> core` is the identity).
//! - **API requests** ([`api`]): validated at the edge, so a caller's mistake is answered with
//!   `INVALID_ARGUMENT` naming the field before anything is proposed: names, key and text sizes,
//!   non-zero ids, enum values, bounds on limits and waits.
//!
//! Encoding (`core -> proto`) never fails.

pub mod api;
mod command;
mod common;
pub mod paxos;
pub mod records;
mod snapshot;

pub use snapshot::{decode_command, decode_lock_snapshot, decode_reply};

use crate::error::ConvertError;

/// `Some(value)` or "required".
pub(crate) fn required<T>(value: Option<T>, field: &str) -> Result<T, ConvertError> {
    value.ok_or_else(|| ConvertError::required(field))
}

/// A count or bound stored as `uint64` on the wire.
pub(crate) fn to_usize(value: u64, field: &str) -> Result<usize, ConvertError> {
    usize::try_from(value).map_err(|_| ConvertError::new(field, format!("{value} is too large")))
}

pub(crate) fn from_usize(value: usize) -> u64 {
    // usize is at most 64 bits on every supported target.
    u64::try_from(value).expect("usize fits in u64")
}

/// A proto enum value that must be known and not `*_UNSPECIFIED` (0).
pub(crate) fn known_enum<E: TryFrom<i32>>(value: i32, field: &str) -> Result<E, ConvertError> {
    if value == 0 {
        return Err(ConvertError::new(field, "must be set (0 is UNSPECIFIED)"));
    }
    E::try_from(value).map_err(|_| ConvertError::new(field, format!("unknown enum value {value}")))
}

/// Converts every element, naming the index of the first bad one.
pub(crate) fn each<P, C>(items: Vec<P>, field: &str) -> Result<Vec<C>, ConvertError>
where
    C: TryFrom<P, Error = ConvertError>,
{
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| C::try_from(item).map_err(|e| e.at(field, index)))
        .collect()
}

/// Converts a required nested message.
pub(crate) fn nested<P, C>(value: Option<P>, field: &str) -> Result<C, ConvertError>
where
    C: TryFrom<P, Error = ConvertError>,
{
    C::try_from(required(value, field)?).map_err(|e| e.within(field))
}
