//! The dialing end: one task per other member keeps one connection to it and writes that peer's
//! queue on it.

use std::sync::Arc;

use picket_core::paxos::NodeId;
use picket_proto::proto::peer_frame::Kind;
use tokio::sync::{mpsc, watch};

use super::conn::{self, Conn, Ended, Outbound};
use super::frame::{self, PeerLink, PeerVersion, Refusal};
use super::{BoxIo, PeerCounters, PeerTiming};
use crate::node::driver::NodeMessage;

/// Where and how to reach one peer.
#[derive(Clone, Debug)]
pub struct PeerTarget {
    pub to: NodeId,
    /// `host:port` (the member's `peer_address`).
    pub address: String,
    /// The TLS client end, with `[tls]`.
    #[cfg(not(madsim))]
    pub tls: Option<crate::tls::PeerClientTls>,
}

/// Why a dial did not give a connection.
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no answer to the handshake in time")]
    Timeout,
    #[error(
        "the peer closed the connection before answering the handshake (a replica of a version \
         before peer wire version 1 serves gRPC on its peer port)"
    )]
    Closed,
    #[error("{0}")]
    Refused(Refusal),
    #[error("the peer answered the handshake with something else than a hello or a refusal")]
    Protocol,
}

/// The outbound task for one peer: runs until `shutdown` (or until the driver drops `queue`).
pub async fn run_outbound(
    link: PeerLink,
    target: PeerTarget,
    timing: PeerTiming,
    mut queue: mpsc::Receiver<NodeMessage>,
    counters: Arc<PeerCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = timing.backoff_min;
    // The last refusal logged at WARN: a refusal repeats at every retry, its change is news.
    let mut refusal_logged: Option<Refusal> = None;
    // Whether this streak of failed dials was logged at WARN (its first one is).
    let mut failure_logged = false;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let dialed = tokio::select! {
            dialed = tokio::time::timeout(timing.handshake_timeout, dial(&link, &target)) => {
                dialed.unwrap_or(Err(DialError::Timeout))
            }
            _ = shutdown.changed() => return,
        };
        let conn = match dialed {
            Ok((conn, version)) => {
                tracing::debug!(to = %target.to, release = %version.release_text(),
                    cluster_version_max = version.cluster_version_max,
                    protocol = version.protocol, "peer version");
                link.members.set_version(target.to, version);
                conn
            }
            Err(error) => {
                if let DialError::Refused(refusal) = &error {
                    PeerCounters::add(&counters.handshakes_refused, 1);
                    if let Some(told) = &refusal.told {
                        // The driver decides whether it says we were removed.
                        link.members.notice(target.to, (**told).clone());
                    }
                    if refusal_logged.as_ref() != Some(refusal) {
                        tracing::warn!(to = %target.to, address = %target.address, rule = %refusal.rule,
                            "the peer refused the connection: {}", refusal.message);
                        refusal_logged = Some(refusal.clone());
                    }
                    backoff = timing.backoff_max;
                } else {
                    PeerCounters::add(&counters.dials_failed, 1);
                    if failure_logged {
                        tracing::debug!(to = %target.to, address = %target.address, %error, "peer unreachable");
                    } else {
                        // A member added at a wrong address, or whose certificate this
                        // replica does not trust, shows here first.
                        tracing::warn!(to = %target.to, address = %target.address, %error,
                            "cannot reach the peer (retrying; said once until it answers)");
                        failure_logged = true;
                    }
                }
                drop_queued(&mut queue, &counters);
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    _ = shutdown.changed() => return,
                }
                backoff = (backoff * 2).min(timing.backoff_max);
                continue;
            }
        };
        PeerCounters::add(&counters.connects, 1);
        backoff = timing.backoff_min;
        refusal_logged = None;
        failure_logged = false;
        tracing::debug!(to = %target.to, address = %target.address, "peer connection open");
        let out = Outbound {
            to: target.to,
            queue: &mut queue,
        };
        let ended = conn::run(
            conn,
            Some(out),
            &timing,
            &counters,
            &mut shutdown,
            |kind| match kind {
                Kind::Ping(_) => Ok(()),
                Kind::Refusal(r) => Err(Ended::Refused(Refusal::from_wire(r))),
                Kind::Hello(_) | Kind::Message(_) => {
                    PeerCounters::add(&counters.messages_dropped_malformed, 1);
                    Ok(())
                }
            },
        )
        .await;
        link.members.clear_version(target.to);
        if let Ended::Shutdown = ended {
            return;
        }
        tracing::debug!(to = %target.to, %ended, "peer connection ended: dialing again");
        // Not at once: a peer that closes every connection must not make this a busy loop.
        tokio::select! {
            () = tokio::time::sleep(timing.backoff_min) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Connects, does TLS, sends the hello and checks the answer.
async fn dial(link: &PeerLink, target: &PeerTarget) -> Result<(Conn, PeerVersion), DialError> {
    let tcp = tokio::net::TcpStream::connect(target.address.as_str()).await?;
    tcp.set_nodelay(true)?;
    #[cfg(not(madsim))]
    let io: BoxIo = match &target.tls {
        Some(tls) => Box::new(tls.connect(tcp).await?),
        None => Box::new(tcp),
    };
    #[cfg(madsim)]
    let io: BoxIo = Box::new(tcp);
    let mut conn = Conn::new(io);
    conn.writer
        .push(&frame::hello(link, target.to))
        .expect("a hello is small");
    conn.writer.flush().await?;
    let Some(answer) = conn.reader.next_frame().await? else {
        return Err(DialError::Closed);
    };
    match frame::decode(&answer) {
        Ok(Kind::Hello(hello)) => {
            let version =
                frame::check_answer(&hello, link, target.to).map_err(DialError::Refused)?;
            Ok((conn, version))
        }
        Ok(Kind::Refusal(r)) => Err(DialError::Refused(Refusal::from_wire(r))),
        Ok(_) | Err(_) => Err(DialError::Protocol),
    }
}

fn drop_queued(queue: &mut mpsc::Receiver<NodeMessage>, counters: &PeerCounters) {
    let mut dropped = 0;
    while queue.try_recv().is_ok() {
        dropped += 1;
    }
    PeerCounters::add(&counters.messages_dropped_unreachable, dropped);
}
