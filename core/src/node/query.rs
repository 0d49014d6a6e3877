//! Read-only queries through the Node: linearizable (read-index) or local (possibly stale).

use std::sync::Arc;

use crate::locks::{
    AuditPage, AuditQuery, ClassSpec, HoldInfo, KeyInfo, LockError, LockSnapshot, LockStateMachine,
    PendingForceRelease, SessionInfo,
};
use crate::time::Instant;

use super::leases::Leases;

/// At most this many holds over their class's max expected hold are answered per namespace
/// (the furthest over first), so one namespace full of stuck holds cannot hide another's.
pub const OVERDUE_HOLDS_PER_NAMESPACE_MAX: usize = 20;
/// At most this many holds over their class's max expected hold are answered in all.
pub const OVERDUE_HOLDS_MAX: usize = 1_000;

/// A question about the lock state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Query {
    Inspect {
        namespace: String,
        key: String,
    },
    ListHolds {
        namespace: String,
        limit: usize,
    },
    LongestHolds,
    Sessions,
    Classes {
        namespace: String,
    },
    Audit(AuditQuery),
    ForceReleases,
    /// The whole replicated state at one revision (a backup: `Admin.SaveSnapshot`).
    Snapshot,
}

/// The answer, with the session's remaining TTL filled in from the leader's deadlines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Key(Box<Result<KeyInfo, LockError>>),
    Holds(Result<Vec<HoldInfo>, LockError>),
    /// The oldest hold of each namespace, and every hold over its class's max expected hold
    /// ([`LockStateMachine::overdue_holds`], bounded by [`OVERDUE_HOLDS_PER_NAMESPACE_MAX`] and
    /// [`OVERDUE_HOLDS_MAX`]).
    LongestHolds {
        longest: Vec<HoldInfo>,
        overdue: Vec<HoldInfo>,
    },
    Sessions(Vec<SessionInfo>),
    Classes(Result<Vec<ClassSpec>, LockError>),
    Audit(AuditPage),
    /// Still approvable at the read's time, oldest first.
    ForceReleases(Vec<PendingForceRelease>),
    /// The whole state at the read's revision.
    Snapshot(Arc<LockSnapshot>),
}

fn fill(hold: &mut HoldInfo, leases: &Leases, now: Instant) {
    hold.session_remaining_ms = leases.remaining_ms(hold.session, now);
}

pub(crate) fn answer(
    sm: &LockStateMachine,
    leases: &Leases,
    now: Instant,
    query: &Query,
) -> Answer {
    match query {
        Query::Inspect { namespace, key } => {
            let mut info = sm.inspect(namespace, key, now);
            if let Ok(KeyInfo {
                holder, holders, ..
            }) = &mut info
            {
                // `holder` is the oldest of `holders`: both are answered the same.
                holder
                    .iter_mut()
                    .chain(holders.iter_mut())
                    .for_each(|h| fill(h, leases, now));
            }
            Answer::Key(Box::new(info))
        }
        Query::ListHolds { namespace, limit } => {
            let mut holds = sm.list_holds(namespace, now, *limit);
            if let Ok(holds) = &mut holds {
                holds.iter_mut().for_each(|h| fill(h, leases, now));
            }
            Answer::Holds(holds)
        }
        Query::LongestHolds => {
            let mut longest = sm.longest_holds(now);
            longest.iter_mut().for_each(|h| fill(h, leases, now));
            let mut overdue =
                sm.overdue_holds(now, OVERDUE_HOLDS_PER_NAMESPACE_MAX, OVERDUE_HOLDS_MAX);
            overdue.iter_mut().for_each(|h| fill(h, leases, now));
            Answer::LongestHolds { longest, overdue }
        }
        Query::Sessions => Answer::Sessions(sm.sessions().collect()),
        Query::Classes { namespace } => Answer::Classes(sm.classes(namespace)),
        Query::Audit(query) => Answer::Audit(sm.audit(query)),
        Query::ForceReleases => Answer::ForceReleases(sm.force_releases_at(now)),
        Query::Snapshot => Answer::Snapshot(Arc::new(sm.snapshot())),
    }
}
