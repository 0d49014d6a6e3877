//! [`LockGuard`]: a held lock, its token, and the signal that it is lost.

use std::sync::Arc;

use picket_core::locks::Token;
use tokio::sync::watch;

use super::error::{ClientError, LostReason};
use super::session::SessionInner;
use crate::proto;

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
    /// Set once released (by `release`); a released guard does nothing on drop.
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("session_id", &self.session.id)
            .field("namespace", &self.namespace)
            .field("key", &self.key)
            .field("token", &self.token)
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
        LockGuard {
            session,
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            token,
            released: false,
        }
    }

    /// The fencing token: the revision of the grant. Rises strictly per key.
    pub fn token(&self) -> Token {
        self.token
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

    /// Still held as far as this client can tell: the session is not lost and its keepalive
    /// deadline (last acknowledged send + ttl) has not passed. Checked against the clock.
    pub fn is_held(&self) -> bool {
        self.session.liveness.is_alive()
    }

    /// Resolves when the lock is lost: its session is gone (server says lost, unknown session)
    /// or its keepalive deadline passed. Select on it next to the critical section.
    pub async fn lost(&self) -> LostReason {
        self.session.lost().await
    }

    /// The loss signal as a watch channel (`None` while held).
    pub fn lost_signal(&self) -> watch::Receiver<Option<LostReason>> {
        self.session.liveness.lost.subscribe()
    }

    /// Releases the lock; answers the waiter granted next, if any.
    pub async fn release(mut self) -> Result<Option<proto::Grant>, ClientError> {
        self.released = true;
        if let Some(error) = self.session.lost_error() {
            return Err(error);
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
        if self.released || !self.session.liveness.is_alive() {
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
