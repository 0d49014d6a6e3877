//! The listening end: accepts the other members' connections, checks their handshake and hands
//! the messages they carry to the driver.

use std::net::SocketAddr;
use std::sync::Arc;

use picket_core::faults::Faults;
use picket_core::node::{NodeCommand, NodeSnapshot};
use picket_core::paxos::NodeId;
use picket_proto::convert::paxos::message_from_wire;
use picket_proto::proto::peer_frame::Kind;
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
    /// The replica's faults: with `buggify` on, received frames pass the frame-fault layer
    /// ([`FrameFaults`], simulation only).
    pub faults: Faults,
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
    let mut faults = FrameFaults::new(inbound.faults.buggify);
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

/// **Simulation only** (`--cfg madsim`): the frame-fault layer of the peer transport, above the
/// framing, on the receiving end of each connection. madsim's TCP never loses, duplicates or
/// reorders bytes (a clogged link stalls, a killed node shows as the end of the stream), so this
/// is where a seed gets a lossy link: while the replica's buggify switch is on
/// ([`Faults::buggify`]), each message frame received is
///
/// - dropped with 1% probability (the run's message **loss**);
/// - delivered twice with 2%;
/// - delayed by 1-50 ms with 2% (delivered later, behind frames that came after it);
/// - held back with 3% and delivered after the next frame (a swap with its successor; a ping
///   or the end of the connection releases it too, so nothing is held indefinitely).
///
/// Every draw comes from the simulator's seeded RNG, so a seed replays them exactly. Paxos must
/// shrug all of it off (it re-sends what matters).
#[cfg(madsim)]
#[derive(Debug)]
struct FrameFaults {
    on: bool,
    /// The frame held back for a swap, if any.
    held: Option<NodeMessage>,
}

#[cfg(madsim)]
impl FrameFaults {
    fn new(on: bool) -> FrameFaults {
        FrameFaults { on, held: None }
    }

    /// True with `probability` (the switch is on).
    fn fire(probability: f64) -> bool {
        use madsim::rand::Rng;
        madsim::rand::thread_rng().gen_bool(probability)
    }

    /// Delivers `msg` as a lossy, duplicating, delaying, reordering link would.
    fn pass(&mut self, msg: NodeMessage, inbox: &Inbox) {
        if !self.on {
            inbox.deliver(msg);
            return;
        }
        let held = self.held.take();
        if Self::fire(0.01) {
            // Lost.
        } else if Self::fire(0.02) {
            inbox.deliver(msg.clone());
            inbox.deliver(msg);
        } else if Self::fire(0.02) {
            use madsim::rand::Rng;
            let delay =
                std::time::Duration::from_millis(madsim::rand::thread_rng().gen_range(1..=50));
            let inbox = inbox.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                inbox.deliver(msg);
            });
        } else if held.is_none() && Self::fire(0.03) {
            self.held = Some(msg);
            return;
        } else {
            inbox.deliver(msg);
        }
        if let Some(held) = held {
            inbox.deliver(held);
        }
    }

    /// Delivers the frame held back, if any (another frame arrived, or the connection ends).
    fn release(&mut self, inbox: &Inbox) {
        if let Some(held) = self.held.take() {
            inbox.deliver(held);
        }
    }
}
