//! The session's state as the client sees it (Chubby's *jeopardy*): `Healthy`, `Jeopardy`,
//! `Safe`, `Lost`, and the transitions between them, as pure functions of the newest
//! acknowledged keepalive and the time (the keepalive task drives them; tests drive them with
//! any instants they like).
//!
//! - `Healthy` -> `Jeopardy`: the newest acknowledged keepalive was *sent* half a TTL ago
//!   ([`jeopardy_after`]) and none since is acknowledged, the deadline not yet passed. In normal
//!   operation a keepalive is acknowledged every `ttl / 3` (plus a round trip), so half a TTL
//!   means one is overdue by about a sixth of the TTL.
//! - `Jeopardy` -> `Safe`: a keepalive is acknowledged (the server renewed the lease, so it was
//!   held all along).
//! - `Safe` -> `Jeopardy`: as from `Healthy`.
//! - any -> `Lost(reason)`: final (the deadline passed, the server said the session is gone,
//!   the client closed it, a keepalive was refused).

use std::time::Duration;

use tokio::time::Instant;

use super::error::LostReason;
use super::keepalive::KeepAliveAck;

/// The state of a session, as [`crate::Session::state`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionState {
    /// Keepalives are acknowledged on time, and have been since the session was created.
    Healthy,
    /// No keepalive acknowledged for half the TTL (counted from the send of the newest
    /// acknowledged one, like the deadline): the lease may be lost. Stop starting new work;
    /// work in flight may go on until [`SessionState::Lost`] (the locks are still held until
    /// then, and fencing protects the resource after).
    Jeopardy {
        /// How long ago the newest acknowledged keepalive was sent, when jeopardy began.
        unacknowledged_for: Duration,
        /// The session's TTL.
        ttl: Duration,
        /// How long until the deadline (`sent + ttl - margin`), when jeopardy began: the session
        /// is lost then unless a keepalive is acknowledged first.
        deadline_in: Duration,
    },
    /// Recovered from jeopardy: a keepalive was acknowledged, the lease (and every lock) held
    /// throughout. Behaves as `Healthy`; stays `Safe` until the next jeopardy or the loss.
    Safe,
    /// The session is lost, and every lock it held. Final.
    Lost(LostReason),
}

impl SessionState {
    /// `Healthy` or `Safe`: keepalives are being acknowledged.
    pub fn is_healthy(&self) -> bool {
        matches!(self, SessionState::Healthy | SessionState::Safe)
    }
}

/// What [`crate::SessionEvents`] yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEvent {
    /// The session's state changed (to `Jeopardy`, `Safe` or `Lost`).
    State(SessionState),
    /// One hold of the session was lost while the session lives on: two operators
    /// force-released it without revoking the session (`reason` is
    /// [`LostReason::ForceReleased`]). The key's guard (if any) reports the same.
    HoldLost {
        namespace: String,
        key: String,
        token: u64,
        reason: LostReason,
    },
}

/// How long without an acknowledged keepalive (from the send of the newest acknowledged one)
/// puts a session in jeopardy: half its TTL.
pub fn jeopardy_after(ttl: Duration) -> Duration {
    ttl / 2
}

/// When the session goes into jeopardy unless a newer keepalive is acknowledged.
pub(crate) fn jeopardy_at(newest: &KeepAliveAck) -> Instant {
    newest.sent_at + jeopardy_after(newest.ttl)
}

/// No newer acknowledgement than `newest` by `now`: the state to move to, if any.
pub(crate) fn on_silence(
    state: &SessionState,
    newest: &KeepAliveAck,
    now: Instant,
) -> Option<SessionState> {
    if !state.is_healthy() || now < jeopardy_at(newest) {
        return None;
    }
    let deadline = newest.deadline();
    if now >= deadline {
        return None; // past the deadline: the session is lost, not in jeopardy
    }
    Some(SessionState::Jeopardy {
        unacknowledged_for: now - newest.sent_at,
        ttl: newest.ttl,
        deadline_in: deadline - now,
    })
}

/// A keepalive was acknowledged: the state to move to, if any.
pub(crate) fn on_ack(state: &SessionState) -> Option<SessionState> {
    matches!(state, SessionState::Jeopardy { .. }).then_some(SessionState::Safe)
}

/// The session is lost for `reason`: the state to move to, if any (the first loss is final).
pub(crate) fn on_lost(state: &SessionState, reason: &LostReason) -> Option<SessionState> {
    (!matches!(state, SessionState::Lost(_))).then(|| SessionState::Lost(reason.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    fn ack(sent_at: Instant) -> KeepAliveAck {
        KeepAliveAck {
            session_id: 7,
            sent_at,
            acked_at: sent_at + Duration::from_millis(5),
            ttl: TTL,
            margin: Duration::from_millis(100),
            keepalives: 1,
        }
    }

    #[test]
    fn silence_for_half_the_ttl_is_jeopardy_and_not_before() {
        let t0 = Instant::now();
        let newest = ack(t0);
        let early = t0 + Duration::from_millis(4_999);
        assert_eq!(on_silence(&SessionState::Healthy, &newest, early), None);
        let at = t0 + Duration::from_millis(5_000);
        assert_eq!(
            on_silence(&SessionState::Healthy, &newest, at),
            Some(SessionState::Jeopardy {
                unacknowledged_for: Duration::from_millis(5_000),
                ttl: TTL,
                deadline_in: Duration::from_millis(4_900),
            })
        );
        // From Safe too, the same way.
        let later = t0 + Duration::from_millis(8_000);
        assert!(matches!(
            on_silence(&SessionState::Safe, &newest, later),
            Some(SessionState::Jeopardy { deadline_in, .. }) if deadline_in == Duration::from_millis(1_900)
        ));
    }

    #[test]
    fn past_the_deadline_is_not_jeopardy_and_jeopardy_is_not_entered_twice() {
        let t0 = Instant::now();
        let newest = ack(t0);
        let past = t0 + Duration::from_millis(9_900);
        assert_eq!(on_silence(&SessionState::Healthy, &newest, past), None);
        let jeopardy = on_silence(&SessionState::Healthy, &newest, t0 + TTL / 2).unwrap();
        assert_eq!(on_silence(&jeopardy, &newest, t0 + TTL * 3 / 4), None);
        let lost = SessionState::Lost(LostReason::Closed);
        assert_eq!(on_silence(&lost, &newest, t0 + TTL / 2), None);
    }

    #[test]
    fn an_ack_in_jeopardy_is_safe_and_otherwise_changes_nothing() {
        let t0 = Instant::now();
        let jeopardy = on_silence(&SessionState::Healthy, &ack(t0), t0 + TTL / 2).unwrap();
        assert_eq!(on_ack(&jeopardy), Some(SessionState::Safe));
        assert_eq!(on_ack(&SessionState::Healthy), None);
        assert_eq!(on_ack(&SessionState::Safe), None);
        assert_eq!(on_ack(&SessionState::Lost(LostReason::Revoked)), None);
    }

    #[test]
    fn the_first_loss_is_final() {
        let expired = LostReason::KeepAliveExpired { ttl_ms: 10_000 };
        for state in [
            SessionState::Healthy,
            SessionState::Safe,
            on_silence(
                &SessionState::Healthy,
                &ack(Instant::now()),
                Instant::now() + TTL / 2,
            )
            .unwrap(),
        ] {
            assert_eq!(
                on_lost(&state, &expired),
                Some(SessionState::Lost(expired.clone()))
            );
        }
        let lost = SessionState::Lost(expired);
        assert_eq!(on_lost(&lost, &LostReason::Closed), None);
        assert!(!lost.is_healthy());
    }

    /// A new acknowledgement moves the jeopardy point: silence is counted from its send.
    #[test]
    fn jeopardy_is_counted_from_the_newest_acknowledged_send() {
        let t0 = Instant::now();
        let newer = ack(t0 + Duration::from_secs(3));
        assert_eq!(jeopardy_at(&newer), t0 + Duration::from_secs(8));
        assert_eq!(on_silence(&SessionState::Safe, &newer, t0 + TTL / 2), None);
    }
}
