//! Identifiers and counters of the lock state machine.

use std::fmt;

/// The number of commands applied so far. Never decreases; advanced by exactly one by every
/// applied command, including a command answered with an error (so revision `r` names the state
/// after the `r`-th command of the log, whatever the outcomes were).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision(pub u64);

/// A semaphore permit's slot: which of a semaphore key's N permits a holder has (`0..N`, the
/// lowest free one when it was granted). A resource that fences per (key, permit slot) refuses
/// a superseded holder of the same permit. Named apart from a Paxos log slot
/// ([`crate::paxos::Slot`]); on the wire it is the `slot` field of grants, holds and events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PermitSlot(pub u32);

impl std::fmt::Display for PermitSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A fencing token: the revision at which the lock was granted. Tokens therefore rise strictly per
/// key (and globally), across leaders, crashes and restores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub u64);

/// A session's id: the revision of the `CreateSession` command that created it (unique, never
/// reused, since revisions never repeat).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(pub u64);

/// A client-chosen request id, strictly increasing per session, that makes retries idempotent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// A force-release request's id: the revision of the `RequestForceRelease` command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ForceReleaseId(pub u64);

impl Token {
    /// The token granted at `revision`.
    pub const fn at(revision: Revision) -> Token {
        Token(revision.0)
    }

    /// True if this token is strictly above `floor`: every token granted on a key is.
    pub const fn is_above(self, floor: Revision) -> bool {
        self.0 > floor.0
    }
}

macro_rules! display_as {
    ($ty:ty, $prefix:literal) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

display_as!(Revision, "r");
display_as!(Token, "t");
display_as!(SessionId, "s");
display_as!(RequestId, "q");
display_as!(ForceReleaseId, "fr");
