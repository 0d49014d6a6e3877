//! When this replica told a client that its session lost a hold or ended: the first push on a
//! `Session` stream ([`crate::api::session_push`]) and the first keepalive answer
//! ([`crate::api::service::keep_alive_entry`]) that carried each loss, with this replica's wall
//! clock. The console's verify page gathers them from every replica
//! (`GET /v1/sessions/{id}/told`, docs/http.md) to say when a force-released holder's client was
//! told, and by what.
//!
//! In memory, per replica, bounded ([`TOLD_KEPT_MAX`], the oldest dropped first): a restart
//! forgets, and a replica that did not answer may have told the client too. "Told" is when the
//! answer or push was handed to the client's stream on this replica; the network may still be
//! carrying it. What is recorded never reaches the lock log or any reply of the gRPC services.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use picket_proto::proto;
use serde::{Deserialize, Serialize};

/// Records kept per replica at most; beyond, the oldest are dropped.
pub const TOLD_KEPT_MAX: usize = 4_096;

/// What the client was told.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "loss", rename_all = "snake_case")]
pub enum Loss {
    /// The session lives on but lost this hold to a force-release without revocation.
    HoldLost {
        namespace: String,
        key: String,
        token: u64,
    },
    /// The session is gone (closed, expired or revoked).
    SessionEnded,
}

/// How it was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// A `SessionEvent` pushed on a subscribed `Session` stream.
    Push,
    /// A keepalive answer (`lost`, `lost_holds`), on a `KeepAlive` or `Session` stream.
    Keepalive,
}

/// One telling: the first of its session, loss and channel on this replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Told {
    pub session_id: u64,
    #[serde(flatten)]
    pub loss: Loss,
    pub by: Channel,
    /// This replica's wall clock, ms since the Unix epoch.
    pub at_ms: u64,
    /// A push: the lock log's revision it reports; a keepalive answer names none.
    pub revision: Option<u64>,
}

/// The record, shared by the services of one replica.
#[derive(Clone, Debug, Default)]
pub struct ToldLog(Arc<Mutex<Kept>>);

#[derive(Debug, Default)]
struct Kept {
    /// Oldest first.
    told: VecDeque<Told>,
    /// `(session, loss, channel)` of every record in `told`: only the first is kept.
    seen: BTreeSet<(u64, Loss, Channel)>,
}

impl ToldLog {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that `session_id` was told `loss` by `by` now (only the first telling counts).
    pub fn record(&self, session_id: u64, loss: Loss, by: Channel, revision: Option<u64>) {
        let mut kept = self.kept();
        let mark = (session_id, loss, by);
        if kept.seen.contains(&mark) {
            return;
        }
        if kept.told.len() >= TOLD_KEPT_MAX {
            if let Some(old) = kept.told.pop_front() {
                kept.seen.remove(&(old.session_id, old.loss, old.by));
            }
        }
        let (session_id, loss, by) = mark.clone();
        kept.seen.insert(mark);
        kept.told.push_back(Told {
            session_id,
            loss,
            by,
            at_ms: wall_ms(),
            revision,
        });
        assert_eq!(kept.told.len(), kept.seen.len(), "one record per mark");
    }

    /// What a keepalive answer tells its session: its end, or the holds it lost.
    pub fn record_keepalive(&self, answer: &proto::KeepAliveResponse) {
        if answer.error.is_some() || answer.session_id == 0 {
            return;
        }
        if answer.lost {
            self.record(
                answer.session_id,
                Loss::SessionEnded,
                Channel::Keepalive,
                None,
            );
        }
        for hold in &answer.lost_holds {
            let loss = Loss::HoldLost {
                namespace: hold.namespace.clone(),
                key: hold.key.clone(),
                token: hold.token,
            };
            self.record(answer.session_id, loss, Channel::Keepalive, None);
        }
    }

    /// What a push queued on a session stream tells its session.
    pub fn record_push(&self, push: &proto::SessionEvent) {
        use proto::session_event::Kind;
        let loss = match &push.kind {
            Some(Kind::HoldLost(hold)) => Loss::HoldLost {
                namespace: hold.namespace.clone(),
                key: hold.key.clone(),
                token: hold.token,
            },
            Some(Kind::Ended(_)) => Loss::SessionEnded,
            None => return,
        };
        self.record(push.session_id, loss, Channel::Push, Some(push.revision));
    }

    /// Everything kept about `session_id`, oldest first.
    pub fn of_session(&self, session_id: u64) -> Vec<Told> {
        let kept = self.kept();
        let told = kept.told.iter().filter(|t| t.session_id == session_id);
        told.cloned().collect()
    }
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost_hold(session_id: u64, token: u64) -> proto::KeepAliveResponse {
        proto::KeepAliveResponse {
            session_id,
            lost_holds: vec![proto::LostHold {
                namespace: "orders".into(),
                key: "ledger/17".into(),
                token,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn only_the_first_telling_of_a_loss_by_each_channel_is_kept() {
        let told = ToldLog::default();
        told.record_keepalive(&lost_hold(7, 40));
        let first = told.of_session(7);
        told.record_keepalive(&lost_hold(7, 40));
        assert_eq!(told.of_session(7), first, "a later answer repeats it");
        told.record_push(&proto::SessionEvent {
            session_id: 7,
            revision: 41,
            kind: Some(proto::session_event::Kind::Ended(Default::default())),
        });
        let all = told.of_session(7);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].by, Channel::Keepalive);
        assert_eq!(
            all[0].loss,
            Loss::HoldLost {
                namespace: "orders".into(),
                key: "ledger/17".into(),
                token: 40
            }
        );
        assert_eq!((all[1].by, all[1].revision), (Channel::Push, Some(41)));
        assert_eq!(all[1].loss, Loss::SessionEnded);
        assert!(told.of_session(8).is_empty());
    }

    #[test]
    fn a_refused_keepalive_tells_nothing_and_the_oldest_go_first() {
        let told = ToldLog::default();
        let mut refused = lost_hold(3, 1);
        refused.lost = true;
        refused.error = Some(Default::default());
        told.record_keepalive(&refused);
        assert!(told.of_session(3).is_empty());
        for session in 1..=TOLD_KEPT_MAX as u64 + 1 {
            told.record_keepalive(&lost_hold(session, 9));
        }
        assert!(told.of_session(1).is_empty(), "the oldest was dropped");
        assert_eq!(told.of_session(2).len(), 1);
        assert_eq!(told.of_session(TOLD_KEPT_MAX as u64 + 1).len(), 1);
        told.record_keepalive(&lost_hold(1, 9));
        assert_eq!(told.of_session(1).len(), 1, "dropped, so new again");
    }
}
