//! Watch events: the lock log. A bounded history of what happened to keys, readable from a
//! revision, filtered by namespace and key prefix. Reading from a revision whose events were
//! dropped is a `Compacted` error, never a silent gap.

use std::sync::Arc;

use super::command::{Identity, LockMode};
use super::error::WatchError;
use super::history::EventHistory;
use super::ids::{ForceReleaseId, PermitSlot, Revision, SessionId, Token};
use crate::time::Instant;

/// Why a hold or a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseCause {
    /// The holder released it.
    Released,
    /// The session was closed by its client.
    SessionClosed,
    /// The session's TTL ran out (the "expired" event).
    SessionExpired,
    /// The session was revoked by a force-release (the "session revoked" event).
    SessionRevoked,
    /// A wait's deadline passed (`ExpireWaits`); only for waits.
    WaitExpired,
    /// The session cancelled the wait (`CancelWait`); only for waits.
    WaitCancelled,
}

/// What happened to a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// `mode`: how the session holds the key; `slot`: a permit's slot (`None` for a lock).
    Granted {
        session: SessionId,
        token: Token,
        mode: LockMode,
        permit: Option<PermitSlot>,
    },
    Queued {
        session: SessionId,
        position: u32,
    },
    Released {
        session: SessionId,
        token: Token,
        cause: ReleaseCause,
    },
    /// A waiter left the queue: its session ended, its deadline passed or it was cancelled.
    WaitRemoved {
        session: SessionId,
        cause: ReleaseCause,
    },
    ForceReleased {
        session: SessionId,
        token: Token,
        request: ForceReleaseId,
        session_revoked: bool,
    },
    /// A class was registered, changed or removed; the event's key is the class prefix.
    ClassChanged {
        class: String,
        removed: bool,
    },
    /// The key was declared a semaphore, its N changed, or (`permits` 0) its declaration
    /// removed.
    SemaphoreChanged {
        permits: u32,
        previous_permits: u32,
    },
}

/// One event. Several events may share a revision (a release and the hand-off it causes; every
/// hold of a closing session).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub revision: Revision,
    /// Log time.
    pub time: Instant,
    /// Shared with the lock table (no copy per event).
    pub namespace: Arc<str>,
    pub key: Arc<str>,
    pub kind: EventKind,
    /// Who the session the event is about said it was, at the event (`None` for class changes,
    /// and for events recorded before identities were kept). Shared, so a snapshot of the
    /// history (one per compaction) copies no strings.
    pub identity: Option<Arc<Identity>>,
}

/// Which events a watcher wants.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchFilter {
    /// `None`: every namespace.
    pub namespace: Option<String>,
    /// Only keys starting with this (`""`: every key).
    pub key_prefix: String,
}

impl WatchFilter {
    pub fn matches(&self, event: &Event) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|namespace| namespace == &*event.namespace)
            && event.key.starts_with(&self.key_prefix)
    }
}

/// A page of events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchPage {
    pub events: Vec<Event>,
    /// Read from here next. Pages end at revision boundaries, so no event is seen twice.
    pub resume_from: Revision,
}

/// The retained history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WatchLog {
    /// Revisions never decrease along it. Shared in chunks with every snapshot.
    pub events: EventHistory,
    /// The highest revision of a dropped event (0: none dropped). Reads from revisions at or
    /// below it are `Compacted`.
    pub compacted_through: Revision,
    pub retention: usize,
}

impl WatchLog {
    pub fn new(retention: usize) -> WatchLog {
        WatchLog {
            events: EventHistory::new(),
            compacted_through: Revision(0),
            retention,
        }
    }

    pub fn push(
        &mut self,
        revision: Revision,
        time: Instant,
        namespace: &Arc<str>,
        key: &Arc<str>,
        kind: EventKind,
        identity: Option<Identity>,
    ) {
        if let Some(last) = self.events.back() {
            assert!(
                last.revision <= revision,
                "watch event at {revision} after {}",
                last.revision
            );
        }
        if self.events.len() == self.retention {
            self.compacted_through = self.events.pop_front().expect("retention > 0");
        }
        self.events.push_back(Event {
            revision,
            time,
            namespace: namespace.clone(),
            key: key.clone(),
            kind,
            identity: identity.map(Arc::new),
        });
    }

    /// Events at revisions `>= from` matching `filter`, about `limit` of them (a page never splits
    /// a revision, so it may exceed `limit` by the rest of its last revision). `current` is the
    /// state machine's revision, where an exhausted read resumes.
    pub fn read(
        &self,
        from: Revision,
        filter: &WatchFilter,
        limit: usize,
        current: Revision,
    ) -> Result<WatchPage, WatchError> {
        if self.compacted_through > Revision(0) && from <= self.compacted_through {
            return Err(WatchError::Compacted {
                requested: from,
                oldest_available: Revision(self.compacted_through.0 + 1),
            });
        }
        let start = self.events.partition_point(|event| event.revision < from);
        let mut events = Vec::new();
        for event in self.events.iter_from(start) {
            if events.len() >= limit {
                let same_revision = events
                    .last()
                    .is_some_and(|last: &Event| last.revision == event.revision);
                if !same_revision {
                    return Ok(WatchPage {
                        resume_from: event.revision,
                        events,
                    });
                }
            }
            if filter.matches(event) {
                events.push(event.clone());
            }
        }
        Ok(WatchPage {
            events,
            resume_from: Revision((current.0 + 1).max(from.0)),
        })
    }
}
