//! The shutdown signal: one `watch` channel that every task of a replica (driver, servers,
//! peers, streams) watches, set by `RunningNode::shutdown`.

use tokio::sync::watch;

/// Resolves once `shutdown` is true (or its sender is gone).
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}
