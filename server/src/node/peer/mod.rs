//! The replica-to-replica transport: `peer.proto` frames over long-lived TCP connections (wire
//! version 1; docs/api.md, "Peer protocol").
//!
//! - **One connection per ordered pair.** Each replica dials every other one ([`run_outbound`],
//!   one task per peer) and sends all its messages for that peer on that connection; the peer's
//!   answers come back on the peer's own connection. The listener ([`run_inbound`]) only reads
//!   messages, and writes its hello and pings.
//! - **Handshake first.** The dialer's first frame is a hello (wire version, cluster id, its id,
//!   the id it means); the listener answers with its own or with a refusal naming the rule
//!   ([`frame::check_hello`]) and closes. A dialer refused keeps retrying at the longest backoff
//!   (a configuration fixed by a restart is picked up) and logs the refusal when it changes.
//! - **Adaptive batching.** The writer takes every message queued for the peer, writes them as
//!   frames and flushes when the queue is empty (etcd's rafthttp stream writer): one write per
//!   burst under load, one per message when idle.
//! - **Heartbeats and deadlines, never TCP resets.** Each end pings after [`PeerTiming::heartbeat`]
//!   without writing, and closes a connection it heard nothing on for
//!   [`PeerTiming::read_deadline`] (a stalled link, a paused or vanished peer); a write that
//!   cannot finish within [`PeerTiming::write_deadline`] closes it too. The dialer then dials
//!   again after a backoff that doubles up to [`PeerTiming::backoff_max`].
//! - **Bounded memory.** The driver's queue per peer is bounded (newest dropped and counted when
//!   full, `DriverCounters::messages_dropped_out`); while the peer is unreachable its queued
//!   messages are dropped and counted ([`PeerCounters::messages_dropped_unreachable`]): Paxos
//!   re-sends what matters, and a backlog of stale heartbeats would only delay fresh ones. The
//!   driver's inbound queue is bounded too (dropped and counted when full).
//! - **TLS** (`[tls]`, not under madsim): mutual TLS with rustls, each end presenting `cert` and
//!   accepting only a certificate that chains to `ca`; the dialer checks the listener's
//!   certificate against the host of its `peer_address` (`crate::tls::PeerTls`).
//!
//! Under madsim the same code runs on `madsim::net` TCP, which never loses, duplicates or
//! reorders bytes; the frame-fault layer (`inbound::FrameFaults`, `cfg(madsim)`, on while the
//! replica's `Faults::buggify` switch is) above the framing does, from the simulation's seeded
//! RNG.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

mod conn;
pub mod frame;
mod inbound;
mod outbound;
#[cfg(all(test, not(madsim)))]
mod tests;

pub use frame::{MemberSet, MembershipNotice, PeerLink, PeerVersion};
pub use inbound::{bind, run_inbound, Inbound, PeerListener};
pub use outbound::{run_outbound, PeerTarget};

/// Counters of the peer transport (shared by a node's peer tasks).
#[derive(Debug, Default)]
pub struct PeerCounters {
    /// Outbound connections that passed the handshake.
    pub connects: AtomicU64,
    /// Inbound connections that passed the handshake.
    pub accepts: AtomicU64,
    /// Handshakes refused, by this replica (inbound) or by the peer (outbound).
    pub handshakes_refused: AtomicU64,
    /// Outbound dials that gave no connection for another reason than a refusal: nothing
    /// listening, a TLS handshake that failed, no answer in time.
    pub dials_failed: AtomicU64,
    /// Connections closed because nothing was heard within the read deadline.
    pub connections_silent: AtomicU64,
    /// Writes of message frames (each one flush of everything queued).
    pub flushes: AtomicU64,
    pub messages_sent: AtomicU64,
    pub messages_dropped_unreachable: AtomicU64,
    pub messages_dropped_too_large: AtomicU64,
    pub messages_received: AtomicU64,
    pub messages_dropped_malformed: AtomicU64,
    pub messages_dropped_inbound_full: AtomicU64,
}

impl PeerCounters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

impl crate::metrics::CounterSource for PeerCounters {
    fn counters(&self) -> Vec<crate::metrics::SourcedCounter> {
        use crate::metrics::SourcedCounter;
        let one = |name, help, counter: &AtomicU64| SourcedCounter {
            name,
            help,
            label: None,
            value: PeerCounters::get(counter),
        };
        let dropped = |reason, counter: &AtomicU64| SourcedCounter {
            name: "picket_peer_messages_dropped",
            help: "Peer messages dropped, by reason (unreachable: no connection to the peer; \
                   too_large: above the frame limit; malformed: undecodable; inbound_full: the \
                   driver's inbound queue was full)",
            label: Some(("reason", reason)),
            value: PeerCounters::get(counter),
        };
        vec![
            one(
                "picket_peer_connects",
                "Outbound peer connections that passed the handshake",
                &self.connects,
            ),
            one(
                "picket_peer_accepts",
                "Inbound peer connections that passed the handshake",
                &self.accepts,
            ),
            one(
                "picket_peer_handshakes_refused",
                "Peer handshakes refused, by this replica or by the peer",
                &self.handshakes_refused,
            ),
            one(
                "picket_peer_dials_failed",
                "Outbound peer dials that failed without a refusal (unreachable, TLS, timeout)",
                &self.dials_failed,
            ),
            one(
                "picket_peer_connections_silent",
                "Peer connections closed because nothing was heard within the read deadline",
                &self.connections_silent,
            ),
            one(
                "picket_peer_flushes",
                "Writes of peer message frames (one flush of everything queued)",
                &self.flushes,
            ),
            one(
                "picket_peer_messages_sent",
                "Peer messages written",
                &self.messages_sent,
            ),
            one(
                "picket_peer_messages_received",
                "Peer messages received and handed to the driver",
                &self.messages_received,
            ),
            dropped("unreachable", &self.messages_dropped_unreachable),
            dropped("too_large", &self.messages_dropped_too_large),
            dropped("malformed", &self.messages_dropped_malformed),
            dropped("inbound_full", &self.messages_dropped_inbound_full),
        ]
    }
}

/// The transport's clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerTiming {
    /// A ping goes after this long without writing anything.
    pub heartbeat: Duration,
    /// A connection on which nothing (no frame, no ping) arrived for this long is closed.
    pub read_deadline: Duration,
    /// A write (with its flush) that takes longer closes the connection.
    pub write_deadline: Duration,
    /// Dialing: the TCP connect, the TLS handshake and the hello answer together; listening: the
    /// TLS handshake and the dialer's hello together.
    pub handshake_timeout: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl Default for PeerTiming {
    fn default() -> PeerTiming {
        PeerTiming {
            heartbeat: Duration::from_millis(200),
            read_deadline: Duration::from_millis(1_000),
            write_deadline: Duration::from_millis(1_000),
            handshake_timeout: Duration::from_millis(1_000),
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_millis(500),
        }
    }
}

/// A byte stream a connection runs on: TCP, or TLS over TCP.
pub(crate) trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerIo for T {}
pub(crate) type BoxIo = Box<dyn PeerIo>;
