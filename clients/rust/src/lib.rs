//! picket-client, the Rust client library: sessions kept alive in the background, lock guards
//! carrying the fencing token, and a signal when a lock is lost; and the [`FencingGate`] a
//! resource server checks those tokens with. The one client core that other languages wrap
//! (`clients/python`). See `docs/client.md`.
//!
//! - [`Client`] connects to any replica list and follows the leader (`not_leader` hints; other
//!   replicas in turn when no hint is given). Every attempt has a timeout; every call a retry
//!   budget. Retries of `Acquire`/`Release` keep their request id, so a retry across a leader
//!   change is answered, not applied twice.
//! - One `Session` stream per [`Client`] carries the keepalives, acquires, releases, cancels
//!   and closes of all its sessions ([`Transport::Stream`], the default; `stream.rs`), under the
//!   same retry loop as the unary calls, which [`Transport::Unary`] keeps.
//! - [`Session`]: created with [`Client::create_session`], kept alive by a tokio task (on the
//!   session stream, or a `KeepAlive` stream of its own with [`Transport::Unary`]). Lost when the server says so (`lost = true`, `unknown_session`) or when
//!   `last acknowledged keepalive send time + ttl` passes, whichever comes first: the server
//!   counts the TTL from its later receipt, so the client gives up first. Its state
//!   ([`Session::state`], [`Session::events`]): `Healthy`, `Jeopardy` (no keepalive acknowledged
//!   for half the TTL), `Safe` (recovered), `Lost(reason)`.
//! - [`LockGuard`]: from [`Session::lock`] (waits) or [`Session::try_lock`]; carries the token;
//!   [`LockGuard::lost`] resolves when the lock is lost; [`LockGuard::release`] (or drop, best
//!   effort) releases it.
//!
//! All time goes through `tokio::time`, so under `--cfg madsim` the library runs on simulated
//! time.
//!
//! ```no_run
//! use picket_client::{Client, ClientConfig};
//!
//! # async fn example() -> Result<(), picket_client::ClientError> {
//! let client = Client::new(ClientConfig::new(["127.0.0.1:7401", "127.0.0.1:7402"], "billing"))?;
//! let session = client.create_session().await?;
//! let guard = session.lock("orders", "invoice/42").await?;
//! tokio::select! {
//!     () = write_with_token(guard.token().0) => {}
//!     reason = guard.lost() => eprintln!("lock lost ({reason}): stop writing"),
//! }
//! guard.release().await?;
//! # Ok(())
//! # }
//! # async fn write_with_token(_token: u64) {}
//! ```

mod admin;
mod cluster;
mod error;
pub mod fencing;
mod guard;
mod keepalive;
mod session;
mod state;
mod stream;
#[cfg(all(test, not(madsim)))]
mod tests;
mod tls;

use std::sync::Arc;

pub use admin::Watcher;
pub use cluster::{
    endpoint_uri, ClientConfig, Credentials, CLOCK_DRIFT_PPM_DEFAULT, CLOCK_DRIFT_PPM_MAX,
    ENDPOINTS_MAX, PRINCIPAL_METADATA, ROLES_METADATA,
};
pub use error::{
    ClientError, LostReason, Refusal, SessionEnd, REQUEST_TOO_OLD, UNKNOWN_SESSION, WAIT_ENDED,
    WAIT_EXPIRED,
};
pub use fencing::{FencingError, FencingGate, KEY_LEN_MAX_GATE};
pub use guard::LockGuard;
pub use keepalive::{keepalive_attempt_timeout, KeepAliveAck};
pub use session::{Closed, Session, SessionEvents};
pub use state::{jeopardy_after, SessionEvent, SessionState};
pub use stream::Transport;
pub use tls::{endpoint_uri_for, TlsConfig, TlsMismatch};

/// A handle on a Picket cluster. Cheap to clone; sessions created from it share its routing.
#[derive(Clone)]
pub struct Client {
    cluster: Arc<cluster::Cluster>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.cluster.config.endpoints)
            .field("leader_guess", &self.cluster.leader_guess())
            .finish()
    }
}

impl Client {
    /// Checks the configuration; connects lazily (on the first call).
    pub fn new(config: ClientConfig) -> Result<Client, ClientError> {
        Ok(Client {
            cluster: Arc::new(cluster::Cluster::new(config, None)?),
        })
    }

    /// A client whose channels come from `factory` (tests: an in-memory transport).
    #[cfg(all(test, not(madsim)))]
    pub(crate) fn with_channels(
        config: ClientConfig,
        factory: cluster::ChannelFactory,
    ) -> Result<Client, ClientError> {
        Ok(Client {
            cluster: Arc::new(cluster::Cluster::new(config, Some(factory))?),
        })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cluster.config
    }

    /// The endpoint currently believed to be the leader.
    pub fn leader_guess(&self) -> String {
        self.cluster.leader_guess()
    }

    /// Creates a session (TTL from the config, else the cluster's default) and keeps it alive
    /// in the background.
    pub async fn create_session(&self) -> Result<Session, ClientError> {
        Session::create(self.cluster.clone()).await
    }
}
