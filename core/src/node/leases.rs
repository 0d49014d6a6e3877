//! Leader-local session deadlines ("leases"). Keepalives are not logged: only the leader keeps a
//! deadline per session, extends it on each keepalive, and proposes `ExpireSessions` once it
//! passes. A new leader gives every session a full TTL from its takeover. Followers keep nothing.

use std::collections::{BTreeMap, BTreeSet};

use crate::locks::SessionId;
use crate::time::Instant;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leases {
    /// session -> deadline, for sessions not yet proposed for expiry.
    deadline: BTreeMap<SessionId, Instant>,
    /// (deadline, session) for every entry of `deadline`: the next to pass first.
    by_deadline: BTreeSet<(Instant, SessionId)>,
    /// Proposed for expiry, not applied yet: keepalives for them are refused.
    expiring: BTreeSet<SessionId>,
}

impl Leases {
    pub fn clear(&mut self) {
        *self = Leases::default();
    }

    /// Sets the session's deadline (a keepalive, a creation or a takeover grace).
    pub fn extend(&mut self, session: SessionId, deadline: Instant) {
        assert!(
            !self.expiring.contains(&session),
            "extending {session}, which is being expired"
        );
        if let Some(old) = self.deadline.insert(session, deadline) {
            assert!(
                self.by_deadline.remove(&(old, session)),
                "deadline index lost {session}"
            );
        }
        self.by_deadline.insert((deadline, session));
    }

    pub fn has(&self, session: SessionId) -> bool {
        self.deadline.contains_key(&session)
    }

    pub fn is_expiring(&self, session: SessionId) -> bool {
        self.expiring.contains(&session)
    }

    /// The session ended (closed, expired, revoked): forget it.
    pub fn remove(&mut self, session: SessionId) {
        if let Some(old) = self.deadline.remove(&session) {
            assert!(
                self.by_deadline.remove(&(old, session)),
                "deadline index lost {session}"
            );
        }
        self.expiring.remove(&session);
    }

    /// Sessions whose deadline is at or before `now`, oldest deadline first, at most `max`.
    pub fn due(&self, now: Instant, max: usize) -> Vec<SessionId> {
        self.by_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .take(max)
            .map(|(_, session)| *session)
            .collect()
    }

    /// Marks sessions as proposed for expiry.
    pub fn mark_expiring(&mut self, sessions: &[SessionId]) {
        for session in sessions {
            let deadline = self
                .deadline
                .remove(session)
                .expect("only sessions with a deadline expire");
            self.by_deadline.remove(&(deadline, *session));
            self.expiring.insert(*session);
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.by_deadline.first().map(|(deadline, _)| *deadline)
    }

    pub fn remaining_ms(&self, session: SessionId, now: Instant) -> Option<u64> {
        if self.expiring.contains(&session) {
            return Some(0);
        }
        self.deadline.get(&session).map(|d| d.ms_since(now))
    }

    pub fn len(&self) -> usize {
        self.deadline.len() + self.expiring.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_extend_expire_and_forget() {
        let mut leases = Leases::default();
        let (a, b) = (SessionId(1), SessionId(2));
        leases.extend(a, Instant::from_millis(100));
        leases.extend(b, Instant::from_millis(50));
        leases.extend(b, Instant::from_millis(150));
        assert_eq!(leases.next_deadline(), Some(Instant::from_millis(100)));
        assert_eq!(leases.due(Instant::from_millis(99), 10), vec![]);
        assert_eq!(leases.due(Instant::from_millis(200), 10), vec![a, b]);
        assert_eq!(leases.due(Instant::from_millis(200), 1), vec![a]);
        leases.mark_expiring(&[a]);
        assert!(leases.is_expiring(a) && !leases.has(a));
        assert_eq!(leases.remaining_ms(a, Instant::ZERO), Some(0));
        assert_eq!(leases.remaining_ms(b, Instant::from_millis(100)), Some(50));
        leases.remove(a);
        leases.remove(b);
        assert_eq!(leases.len(), 0);
        assert_eq!(leases.next_deadline(), None);
    }
}
