//! The replica-to-replica transport (docs/api.md, service `Peer`).
//!
//! Outbound: one task per other member owns a bounded queue of messages for it and one
//! client stream (`Peer.Send`) to it; it batches whatever is queued into one `PeerBatch`
//! (bounded in messages and bytes), and re-opens the stream after a failure with a capped
//! backoff. The stream has no acknowledgements, so a connection that goes silent without an
//! error would swallow everything after it: a send that stalls for [`STREAM_SEND_TIMEOUT`]
//! abandons the connection, and every connection is replaced after [`STREAM_AGE_MAX`]. While the peer is unreachable queued messages are dropped (Paxos re-sends
//! what matters; a backlog of stale heartbeats would only delay fresh ones).
//!
//! Inbound: the `Peer` service decodes each batch ([`PeerBatchIn`]: a malformed message is
//! dropped and counted, a misaddressed batch refused whole) and hands the messages to the
//! driver without waiting (dropped when its queue is full).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use picket_core::node::{NodeCommand, NodeSnapshot};
use picket_core::paxos::NodeId;
use picket_net::convert::paxos::{message_to_wire, PeerBatchIn};
use picket_net::proto;
use picket_net::proto::peer_client::PeerClient;
use picket_net::PEER_MESSAGE_BYTES_MAX;
use prost::Message as _;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};

use crate::api::stream::ChannelStream;
use crate::node::driver::{DriverHandle, NodeMessage, PeerInput};

/// Messages in one batch at most.
const BATCH_MESSAGES_MAX: usize = 512;
/// Encoded bytes of one batch at most (a single larger message goes alone, up to the limit).
const BATCH_BYTES_TARGET: usize = 4 << 20;
/// Batches queued on an open stream at most.
const STREAM_BATCHES_MAX: usize = 16;
/// A batch that cannot be handed to the stream within this long means the stream stalled (a
/// peer that stopped reading, a connection that died without an error): it is abandoned and a
/// new connection opened.
const STREAM_SEND_TIMEOUT: Duration = Duration::from_millis(1_000);
/// An open stream is replaced by a new connection after this long. The stream carries no
/// acknowledgements, so a connection that went silent without an error (a stalled link) would
/// otherwise swallow every later message; this bounds how long that can last.
const STREAM_AGE_MAX: Duration = Duration::from_secs(3);

/// Counters of the peer transport (shared by all of a node's peer tasks and the service).
#[derive(Debug, Default)]
pub struct PeerCounters {
    pub batches_sent: AtomicU64,
    pub messages_dropped_unreachable: AtomicU64,
    pub messages_dropped_too_large: AtomicU64,
    pub batches_received: AtomicU64,
    pub messages_dropped_malformed: AtomicU64,
    pub messages_dropped_inbound_full: AtomicU64,
    pub batches_refused: AtomicU64,
    pub connects: AtomicU64,
}

/// How to connect to a peer.
#[derive(Clone, Debug)]
pub struct PeerTarget {
    pub me: NodeId,
    pub to: NodeId,
    pub cluster_id: String,
    /// `http://host:port` (or `https://` with TLS).
    pub url: String,
    #[cfg(not(madsim))]
    pub tls: Option<tonic::transport::ClientTlsConfig>,
}

/// The outbound task for one peer: runs until `shutdown`.
pub async fn run_outbound(
    target: PeerTarget,
    mut queue: mpsc::Receiver<NodeMessage>,
    counters: Arc<PeerCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff_ms = 50u64;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let client = tokio::select! {
            client = connect(&target) => client,
            _ = shutdown.changed() => return,
        };
        let mut client = match client {
            Ok(client) => client,
            Err(error) => {
                tracing::debug!(to = %target.to, url = %target.url, %error, "peer unreachable");
                drop_queued(&mut queue, &counters);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(backoff_ms)) => {}
                    _ = shutdown.changed() => return,
                }
                backoff_ms = (backoff_ms * 2).min(1_000);
                continue;
            }
        };
        counters.connects.fetch_add(1, Ordering::Relaxed);
        backoff_ms = 50;
        let (tx, rx) = mpsc::channel::<proto::PeerBatch>(STREAM_BATCHES_MAX);
        let mut call = tokio::spawn(async move { client.send(ChannelStream::new(rx)).await });
        tracing::debug!(to = %target.to, url = %target.url, "peer stream open");
        let retire_at = tokio::time::Instant::now() + STREAM_AGE_MAX;
        loop {
            let first = tokio::select! {
                msg = queue.recv() => msg,
                () = tokio::time::sleep_until(retire_at) => break,
                _ = shutdown.changed() => { call.abort(); return; }
            };
            let Some(first) = first else {
                call.abort();
                return;
            };
            let batch = collect_batch(&target, first, &mut queue, &counters);
            if batch.messages.is_empty() {
                continue;
            }
            match tokio::time::timeout(STREAM_SEND_TIMEOUT, tx.send(batch)).await {
                Ok(Ok(())) => {}
                // The call ended (peer restarted, network broke): open a new stream.
                Ok(Err(_)) => break,
                Err(_) => {
                    tracing::debug!(to = %target.to, "peer stream stalled: reconnecting");
                    break;
                }
            }
            counters.batches_sent.fetch_add(1, Ordering::Relaxed);
            if tokio::time::Instant::now() >= retire_at {
                break;
            }
        }
        // Ends the call's request stream (the peer still takes what was sent) and lets it finish
        // in the background while the next connection opens; a stalled call is aborted.
        drop(tx);
        let to = target.to;
        tokio::spawn(async move {
            match tokio::time::timeout(STREAM_SEND_TIMEOUT, &mut call).await {
                Ok(Ok(Err(status))) => tracing::debug!(%to, %status, "peer stream ended"),
                Ok(_) => {}
                Err(_) => {
                    tracing::debug!(%to, "peer stream did not end: abandoned");
                    call.abort();
                }
            }
        });
    }
}

async fn connect(
    target: &PeerTarget,
) -> Result<PeerClient<tonic::transport::Channel>, tonic::transport::Error> {
    let endpoint = tonic::transport::Endpoint::from_shared(target.url.clone())?
        .connect_timeout(Duration::from_millis(500))
        .tcp_nodelay(true);
    #[cfg(not(madsim))]
    let endpoint = match &target.tls {
        Some(tls) => endpoint.tls_config(tls.clone())?,
        None => endpoint,
    };
    let channel = endpoint.connect().await?;
    Ok(PeerClient::new(channel)
        .max_decoding_message_size(PEER_MESSAGE_BYTES_MAX)
        .max_encoding_message_size(PEER_MESSAGE_BYTES_MAX))
}

fn drop_queued(queue: &mut mpsc::Receiver<NodeMessage>, counters: &PeerCounters) {
    while queue.try_recv().is_ok() {
        counters
            .messages_dropped_unreachable
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// `first` and whatever else is queued, within the batch bounds.
fn collect_batch(
    target: &PeerTarget,
    first: NodeMessage,
    queue: &mut mpsc::Receiver<NodeMessage>,
    counters: &PeerCounters,
) -> proto::PeerBatch {
    let mut messages = Vec::new();
    let mut bytes = 0usize;
    let mut next = Some(first);
    while let Some(msg) = next.take() {
        let wire = message_to_wire::<NodeCommand, NodeSnapshot>(msg);
        let len = wire.encoded_len();
        if len + 1024 > PEER_MESSAGE_BYTES_MAX {
            tracing::error!(to = %target.to, len, "peer message above the message size limit: dropped");
            counters
                .messages_dropped_too_large
                .fetch_add(1, Ordering::Relaxed);
        } else {
            bytes += len;
            messages.push(wire);
        }
        if messages.len() >= BATCH_MESSAGES_MAX || bytes >= BATCH_BYTES_TARGET {
            break;
        }
        next = queue.try_recv().ok();
    }
    proto::PeerBatch {
        cluster_id: target.cluster_id.clone(),
        from_node_id: target.me.0,
        to_node_id: target.to.0,
        messages,
    }
}

/// The `Peer` service.
#[derive(Debug, Clone)]
pub struct PeerService {
    pub driver: DriverHandle,
    pub counters: Arc<PeerCounters>,
    /// Ends open streams at shutdown (a graceful server stop waits for them).
    pub shutdown: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl proto::peer_server::Peer for PeerService {
    async fn send(
        &self,
        request: Request<Streaming<proto::PeerBatch>>,
    ) -> Result<Response<proto::PeerSendSummary>, Status> {
        let mut stream = request.into_inner();
        let mut summary = proto::PeerSendSummary::default();
        let mut shutdown = self.shutdown.clone();
        loop {
            let next = tokio::select! {
                next = stream.message() => next?,
                () = crate::shutdown::stopped(&mut shutdown) => None,
            };
            let Some(batch) = next else { break };
            let batch = PeerBatchIn::<NodeCommand, NodeSnapshot>::from_wire(
                batch,
                &self.driver.cluster_id,
                self.driver.id,
            );
            let batch = match batch {
                Ok(batch) => batch,
                Err(error) => {
                    self.counters
                        .batches_refused
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, "refused a peer batch");
                    return Err(Status::from(error));
                }
            };
            summary.batches_received += 1;
            self.counters
                .batches_received
                .fetch_add(1, Ordering::Relaxed);
            if batch.dropped > 0 {
                summary.messages_dropped += batch.dropped as u64;
                self.counters
                    .messages_dropped_malformed
                    .fetch_add(batch.dropped as u64, Ordering::Relaxed);
                tracing::debug!(from = %batch.from, error = ?batch.first_error, "dropped malformed peer messages");
            }
            #[cfg(madsim)]
            let batch = PeerBatchIn {
                messages: buggify::mangle(batch.messages),
                ..batch
            };
            for msg in batch.messages {
                if !self.driver.peer_message(PeerInput {
                    from: batch.from,
                    msg,
                }) {
                    summary.messages_dropped += 1;
                    self.counters
                        .messages_dropped_inbound_full
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(Response::new(summary))
    }
}

/// **Simulation only** (`--cfg madsim`, compiled out of picketd): the buggify points of the peer
/// transport (switched by [`crate::node::buggify`]). madsim's gRPC streams never lose, duplicate or
/// reorder a message, so this is where a seed gets lossy links: each received message is dropped
/// with 1% probability or delivered twice with 2%, and 5% of batches arrive reversed. Paxos must
/// shrug all of it off (it re-sends what matters).
#[cfg(madsim)]
pub mod buggify {
    use crate::node::buggify::{fire, on};
    use crate::node::driver::NodeMessage;

    /// A received batch as a lossy, duplicating, reordering link would deliver it.
    pub(crate) fn mangle(messages: Vec<NodeMessage>) -> Vec<NodeMessage> {
        if !on() {
            return messages;
        }
        let mut out = Vec::with_capacity(messages.len());
        for msg in messages {
            if fire(0.01) {
                continue;
            }
            if fire(0.02) {
                out.push(msg.clone());
            }
            out.push(msg);
        }
        if fire(0.05) {
            out.reverse();
        }
        out
    }
}
