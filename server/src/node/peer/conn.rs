//! One established connection, either end: reads frames, writes the queued messages (dialer
//! only) and pings, and watches the read deadline.

use std::fmt;

use picket_core::node::{NodeCommand, NodeSnapshot};
use picket_core::paxos::NodeId;
use picket_proto::convert::paxos::message_to_wire;
use picket_proto::proto::peer_frame::Kind;
use picket_proto::proto::PeerPing;
use tokio::io::{ReadHalf, WriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

use super::frame::{self, FrameReader, FrameWriter, Refusal, TooLarge};
use super::{BoxIo, PeerCounters, PeerTiming};
use crate::node::driver::NodeMessage;

/// Bytes of frames buffered at most before they are written (a burst larger than this is written
/// in parts, each flushed).
const WRITE_BYTES_TARGET: usize = 4 << 20;

/// Why a connection ended.
#[derive(Debug)]
pub enum Ended {
    /// The node is stopping (or its driver stopped).
    Shutdown,
    /// The other end closed the connection.
    Closed,
    /// Nothing arrived within the read deadline.
    Silent,
    /// A write did not finish within the write deadline.
    WriteStalled,
    /// The other end refused the connection (or a frame broke the protocol).
    Refused(Refusal),
    Io(std::io::Error),
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::Shutdown => write!(f, "the node is stopping"),
            Ended::Closed => write!(f, "closed by the peer"),
            Ended::Silent => write!(f, "nothing heard within the read deadline"),
            Ended::WriteStalled => write!(f, "a write did not finish within the write deadline"),
            Ended::Refused(refusal) => write!(f, "refused: {refusal}"),
            Ended::Io(error) => write!(f, "{error}"),
        }
    }
}

/// The two halves of a connection, framed.
pub struct Conn {
    pub reader: FrameReader<ReadHalf<BoxIo>>,
    pub writer: FrameWriter<WriteHalf<BoxIo>>,
}

impl Conn {
    pub fn new(io: BoxIo) -> Conn {
        let (read, write) = tokio::io::split(io);
        Conn {
            reader: FrameReader::new(read),
            writer: FrameWriter::new(write),
        }
    }

    /// Writes what was pushed, within the write deadline.
    pub async fn flush(&mut self, timing: &PeerTiming) -> Result<(), Ended> {
        match tokio::time::timeout(timing.write_deadline, self.writer.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(Ended::Io(error)),
            Err(_) => Err(Ended::WriteStalled),
        }
    }
}

/// What the dialer's end writes: the queue of messages for `to`.
pub struct Outbound<'a> {
    pub to: NodeId,
    pub queue: &'a mut mpsc::Receiver<NodeMessage>,
}

/// Runs an established connection until it ends. `on_frame` takes every frame received (its
/// `Err` ends the connection); with `outbound`, every queued message is written, and the writes
/// are flushed when the queue is empty.
pub async fn run(
    mut conn: Conn,
    mut outbound: Option<Outbound<'_>>,
    timing: &PeerTiming,
    counters: &PeerCounters,
    shutdown: &mut watch::Receiver<bool>,
    mut on_frame: impl FnMut(Kind) -> Result<(), Ended>,
) -> Ended {
    let mut tick = tokio::time::interval_at(Instant::now() + timing.heartbeat, timing.heartbeat);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut heard = Instant::now();
    let mut written = Instant::now();
    // Made once, not per frame (each `changed()` registers and unregisters a waiter).
    let stop = crate::shutdown::stopped(shutdown);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            () = &mut stop => return Ended::Shutdown,
            read = conn.reader.next_frame() => match read {
                Ok(Some(bytes)) => {
                    heard = Instant::now();
                    match frame::decode(&bytes) {
                        Ok(kind) => {
                            if let Err(end) = on_frame(kind) {
                                return end;
                            }
                        }
                        Err(error) => {
                            PeerCounters::add(&counters.messages_dropped_malformed, 1);
                            tracing::debug!(%error, "dropped a malformed peer frame");
                        }
                    }
                }
                Ok(None) => return Ended::Closed,
                Err(error) => return Ended::Io(error),
            },
            msg = next_queued(&mut outbound) => {
                let (Some(msg), Some(out)) = (msg, outbound.as_mut()) else {
                    // The driver dropped its queue: it stopped.
                    return Ended::Shutdown;
                };
                if let Err(end) = write_queued(&mut conn, msg, out, timing, counters).await {
                    return end;
                }
                written = Instant::now();
            },
            _ = tick.tick() => {
                let now = Instant::now();
                if now.duration_since(heard) >= timing.read_deadline {
                    PeerCounters::add(&counters.connections_silent, 1);
                    return Ended::Silent;
                }
                // A ping at least every heartbeat while nothing else is written.
                if now.duration_since(written) >= timing.heartbeat / 2 {
                    conn.writer
                        .push(&frame::frame(Kind::Ping(PeerPing {})))
                        .expect("a ping is small");
                    if let Err(end) = conn.flush(timing).await {
                        return end;
                    }
                    written = now;
                }
            }
        }
    }
}

/// The next queued message, or never without a queue.
async fn next_queued(outbound: &mut Option<Outbound<'_>>) -> Option<NodeMessage> {
    match outbound {
        Some(out) => out.queue.recv().await,
        None => std::future::pending().await,
    }
}

/// Writes `first` and everything else queued for the peer, then flushes: adaptive batching.
async fn write_queued(
    conn: &mut Conn,
    first: NodeMessage,
    out: &mut Outbound<'_>,
    timing: &PeerTiming,
    counters: &PeerCounters,
) -> Result<(), Ended> {
    let mut next = Some(first);
    while let Some(msg) = next.take() {
        let frame = frame::frame(Kind::Message(message_to_wire::<NodeCommand, NodeSnapshot>(
            msg,
        )));
        match conn.writer.push(&frame) {
            Ok(()) => PeerCounters::add(&counters.messages_sent, 1),
            Err(TooLarge(len)) => {
                tracing::error!(to = %out.to, len, "peer message above the message size limit: dropped");
                PeerCounters::add(&counters.messages_dropped_too_large, 1);
            }
        }
        if conn.writer.buffered() >= WRITE_BYTES_TARGET {
            conn.flush(timing).await?;
            PeerCounters::add(&counters.flushes, 1);
        }
        next = out.queue.try_recv().ok();
    }
    if conn.writer.buffered() > 0 {
        conn.flush(timing).await?;
        PeerCounters::add(&counters.flushes, 1);
    }
    Ok(())
}
