//! [`LockGuard`]: a held lock, its token, and the signal that it is lost.

use std::sync::Arc;

use picket_core::locks::Token;
use tokio::sync::watch;

use super::error::{ClientError, LostReason};
use super::keepalive::HoldKey;
use super::session::SessionInner;
use picket_proto::proto;

/// A lock held by a session. Pass [`LockGuard::token`] with every write to the protected
/// resource (which checks it with a [`crate::FencingGate`]), and stop writing when
/// [`LockGuard::lost`] resolves.
///
/// Release it with [`LockGuard::release`]; dropping it releases it in the background, best
/// effort (if that fails the lock is freed when the session closes or expires).
pub struct LockGuard {
    session: Arc<SessionInner>,
    namespace: String,
    key: String,
    token: Token,
    /// A semaphore permit's slot (`None` for a lock).
    slot: Option<u32>,
    /// Set once released (by `release`); a released guard does nothing on drop.
    released: bool,
    /// This hold's loss signal: the session's loss, or a force-release of this token.
    lost: watch::Receiver<Option<LostReason>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("session_id", &self.session.id)
            .field("namespace", &self.namespace)
            .field("key", &self.key)
            .field("token", &self.token)
            .field("slot", &self.slot)
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        session: Arc<SessionInner>,
        namespace: &str,
        key: &str,
        token: Token,
    ) -> LockGuard {
        assert!(token.0 > 0, "a grant's token is a revision, never 0");
        let lost = session
            .liveness
            .watch_hold((namespace.to_owned(), key.to_owned(), token.0));
        LockGuard {
            session,
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            token,
            slot: None,
            released: false,
            lost,
        }
    }

    /// The guard of a semaphore permit in `slot`.
    pub(crate) fn with_slot(mut self, slot: Option<u32>) -> LockGuard {
        self.slot = slot;
        self
    }

    fn hold_key(&self) -> HoldKey {
        (self.namespace.clone(), self.key.clone(), self.token.0)
    }

    /// The fencing token: the revision of the grant. Rises strictly per key.
    pub fn token(&self) -> Token {
        self.token
    }

    /// A semaphore permit's slot (`None` for a lock): fence with
    /// [`crate::fencing::FencingGate::check_slot`] on (key, slot).
    pub fn slot(&self) -> Option<u32> {
        self.slot
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn session_id(&self) -> u64 {
        self.session.id
    }

    /// Still held as far as this client can tell: the session is not lost, its keepalive
    /// deadline (last acknowledged send + ttl) has not passed (checked against the clock), and
    /// no keepalive answer reported this hold force-released.
    pub fn is_held(&self) -> bool {
        self.session.liveness.is_alive() && self.lost.borrow().is_none()
    }

    /// Resolves when the lock is lost: its session is gone (server says lost, unknown session),
    /// its keepalive deadline passed, or a keepalive answer reported this hold force-released
    /// ([`LostReason::ForceReleased`]; the session lives on). Select on it next to the critical
    /// section.
    pub async fn lost(&self) -> LostReason {
        let mut own = self.lost.clone();
        // The `Ref` wait_for answers must not live across an await: owned inside the block.
        let forced = async move {
            own.wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|reason| reason.clone())
        };
        tokio::select! {
            reason = self.session.lost() => reason,
            reason = forced => match reason {
                Some(reason) => reason,
                // The sender lives in the session's hold table while this guard exists.
                None => self.session.lost().await,
            },
        }
    }

    /// The loss signal as a watch channel (`None` while held): the session's loss or this
    /// hold's force-release.
    pub fn lost_signal(&self) -> watch::Receiver<Option<LostReason>> {
        self.lost.clone()
    }

    /// Releases the lock; answers the waiter granted next, if any.
    pub async fn release(mut self) -> Result<Option<proto::Grant>, ClientError> {
        self.released = true;
        self.session.liveness.forget_hold(&self.hold_key());
        if let Some(error) = self.session.lost_error() {
            return Err(error);
        }
        let force_released = self.lost.borrow().clone();
        if let Some(reason) = force_released {
            return Err(ClientError::LockLost {
                namespace: self.namespace.clone(),
                key: self.key.clone(),
                token: self.token.0,
                reason,
            });
        }
        let response = self
            .session
            .release(&self.namespace, &self.key, self.token)
            .await?;
        Ok(response.next)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.session.liveness.forget_hold(&self.hold_key());
        if !self.is_held() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let session = self.session.clone();
        let (namespace, key, token) = (
            std::mem::take(&mut self.namespace),
            std::mem::take(&mut self.key),
            self.token,
        );
        runtime.spawn(async move {
            let _ = session.release(&namespace, &key, token).await;
        });
    }
}
