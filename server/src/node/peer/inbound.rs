//! The listening end: accepts the other members' connections, checks their handshake and hands
//! the messages they carry to the driver.

use std::net::SocketAddr;
use std::sync::Arc;

use picket_core::node::{NodeCommand, NodeSnapshot};
use picket_core::paxos::NodeId;
use picket_net::convert::paxos::message_from_wire;
use picket_net::proto::peer_frame::Kind;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::conn::{self, Conn, Ended};
use super::frame::{self, PeerLink, Refusal};
use super::{BoxIo, PeerCounters, PeerTiming};
use crate::node::driver::{DriverHandle, NodeMessage, PeerInput};

/// The peer port, bound (so that a port in use fails the start).
#[derive(Debug)]
pub struct PeerListener {
    listener: TcpListener,
    pub addr: SocketAddr,
}

/// Binds the peer port.
pub async fn bind(addr: SocketAddr) -> std::io::Result<PeerListener> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    Ok(PeerListener { listener, addr })
}

/// What every inbound connection of a node shares.
#[derive(Clone, Debug)]
pub struct Inbound {
    pub link: PeerLink,
    pub timing: PeerTiming,
    pub driver: DriverHandle,
    pub counters: Arc<PeerCounters>,
    /// The TLS server end, with `[tls]`.
    #[cfg(not(madsim))]
    pub tls: Option<crate::tls::PeerServerTls>,
}

/// Accepts connections until `shutdown`; each runs in its own task (and ends at shutdown too).
pub async fn run_inbound(
    listener: PeerListener,
    inbound: Inbound,
    mut shutdown: watch::Receiver<bool>,
) {
    let inbound = Arc::new(inbound);
    loop {
        let accepted = tokio::select! {
            accepted = listener.listener.accept() => accepted,
            _ = shutdown.changed() => return,
        };
        match accepted {
            Ok((stream, remote)) => {
                tokio::spawn(serve(stream, remote, inbound.clone(), shutdown.clone()));
            }
            Err(error) => {
                // Out of file descriptors, say: wait a little rather than spin.
                tracing::warn!(addr = %listener.addr, %error, "peer port: accept failed");
                tokio::time::sleep(inbound.timing.backoff_min).await;
            }
        }
    }
}

/// How a replica hands one connection's messages to its driver.
#[derive(Clone, Debug)]
pub struct Inbox {
    driver: DriverHandle,
    from: NodeId,
    counters: Arc<PeerCounters>,
}

impl Inbox {
    /// Hands `msg` to the driver without waiting: dropped and counted when its queue is full.
    pub fn deliver(&self, msg: NodeMessage) {
        if !self.driver.peer_message(PeerInput {
            from: self.from,
            msg,
        }) {
            PeerCounters::add(&self.counters.messages_dropped_inbound_full, 1);
        }
    }
}

async fn serve(
    stream: TcpStream,
    remote: SocketAddr,
    inbound: Arc<Inbound>,
    mut shutdown: watch::Receiver<bool>,
) {
    let timing = inbound.timing;
    let handshake = tokio::time::timeout(
        timing.handshake_timeout,
        handshake(stream, remote, &inbound),
    );
    let (conn, from) = match handshake.await {
        Ok(Ok(accepted)) => accepted,
        Ok(Err(error)) => {
            tracing::debug!(%remote, %error, "peer connection closed in its handshake");
            return;
        }
        Err(_) => {
            tracing::debug!(%remote, "peer connection closed: no handshake in time");
            return;
        }
    };
    PeerCounters::add(&inbound.counters.accepts, 1);
    tracing::debug!(%remote, from = %from, "peer connection accepted");
    let inbox = Inbox {
        driver: inbound.driver.clone(),
        from,
        counters: inbound.counters.clone(),
    };
    #[cfg(madsim)]
    let mut faults = super::faults::FrameFaults::default();
    let counters = &inbound.counters;
    let link = &inbound.link;
    let ended = conn::run(conn, None, &timing, counters, &mut shutdown, |kind| {
        if !link.members.contains(&from) {
            // No membership in effect names it any more (it was removed): the connection is
            // closed, and its next dial is refused with what this replica knows, from which
            // it learns it was removed.
            return Err(Ended::Refused(Refusal::new(
                "peer_not_a_member",
                format!("node {} is no longer a member", from.0),
            )));
        }
        match kind {
            Kind::Message(wire) => match message_from_wire::<NodeCommand, NodeSnapshot>(wire) {
                Ok(msg) => {
                    PeerCounters::add(&counters.messages_received, 1);
                    #[cfg(madsim)]
                    faults.pass(msg, &inbox);
                    #[cfg(not(madsim))]
                    inbox.deliver(msg);
                }
                Err(error) => {
                    PeerCounters::add(&counters.messages_dropped_malformed, 1);
                    tracing::debug!(from = %from, %error, "dropped a malformed peer message");
                }
            },
            Kind::Ping(_) => {
                #[cfg(madsim)]
                faults.release(&inbox);
            }
            Kind::Hello(_) | Kind::Refusal(_) => {
                PeerCounters::add(&counters.messages_dropped_malformed, 1);
            }
        }
        Ok(())
    })
    .await;
    #[cfg(madsim)]
    faults.release(&inbox);
    tracing::debug!(%remote, from = %from, %ended, "peer connection ended");
}

/// TLS (with `[tls]`), then the dialer's hello: the connection and who dialed, or the refusal
/// (sent to the dialer, logged at WARN).
async fn handshake(
    stream: TcpStream,
    remote: SocketAddr,
    inbound: &Inbound,
) -> Result<(Conn, NodeId), Ended> {
    stream.set_nodelay(true).map_err(Ended::Io)?;
    #[cfg(not(madsim))]
    let io: BoxIo = match &inbound.tls {
        Some(tls) => Box::new(tls.accept(stream).await.map_err(Ended::Io)?),
        None => Box::new(stream),
    };
    #[cfg(madsim)]
    let io: BoxIo = Box::new(stream);
    let mut conn = Conn::new(io);
    let first = match conn.reader.next_frame().await {
        Ok(Some(bytes)) => frame::decode(&bytes),
        Ok(None) => return Err(Ended::Closed),
        Err(error) => Err(error.to_string()),
    };
    let checked = match first {
        Ok(Kind::Hello(hello)) => frame::check_hello(&hello, &inbound.link),
        Ok(_) => Err(not_a_hello("another frame")),
        Err(error) => Err(not_a_hello(&error)),
    };
    match checked {
        Ok(from) => {
            conn.writer
                .push(&frame::hello(&inbound.link, from))
                .expect("a hello is small");
            conn.flush(&inbound.timing).await?;
            Ok((conn, from))
        }
        Err(refusal) => {
            PeerCounters::add(&inbound.counters.handshakes_refused, 1);
            tracing::warn!(%remote, rule = %refusal.rule, "refused a peer connection: {}",
                refusal.message);
            conn.writer
                .push(&refusal.to_frame())
                .expect("a refusal is small");
            // Best effort: the dialer may be gone, or not speak the protocol at all.
            let _ = conn.flush(&inbound.timing).await;
            Err(Ended::Refused(refusal))
        }
    }
}

fn not_a_hello(what: &str) -> Refusal {
    Refusal::new(
        "peer_handshake_first",
        format!(
            "the first frame must be a hello, got {what} (a replica of a version before peer \
             wire version 1 dials with gRPC)"
        ),
    )
}
