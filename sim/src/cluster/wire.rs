//! What travels between simulated nodes over madsim's network (sim-local transport: messages
//! are passed as Rust values on `madsim::net::Endpoint`, so nothing is encoded).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};

use madsim::net::Endpoint;
use picket_core::locks::LockSnapshot;
use picket_core::locks::{Command, Outcome, SessionId, SessionProof};
use picket_core::node::{KeepAliveError, NodeCommand};
use picket_core::paxos::{Message, NodeId};

/// The tag every inbound message of a replica arrives on; replies use the request's id.
pub const TAG_INBOUND: u64 = 0;
pub const REPLICA_PORT: u16 = 7000;
pub const CLIENT_PORT: u16 = 7100;
pub const RESOURCE_PORT: u16 = 8000;

/// A message to a replica. (Boxed as a whole into a madsim payload, so the size difference of
/// the variants costs nothing per message.)
#[allow(clippy::large_enum_variant)]
pub enum Inbound {
    Peer {
        from: NodeId,
        msg: Message<NodeCommand, LockSnapshot>,
    },
    Request {
        id: u64,
        request: Request,
    },
}

pub enum Request {
    Propose(Box<Command>),
    KeepAlive(SessionId, SessionProof),
}

/// A replica's answer, sent to the requester's address on tag `id`.
pub enum Response {
    Outcome(Outcome),
    NotLeader(Option<NodeId>),
    KeepAlive(Result<u64, KeepAliveError>),
}

/// Replica `index` (0-based) is `NodeId(index + 1)` at 10.0.0.(index + 1).
pub fn replica_addr(node: NodeId) -> SocketAddr {
    SocketAddr::new(replica_ip(node), REPLICA_PORT)
}

pub fn replica_ip(node: NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, node.0 as u8))
}

pub fn client_ip(index: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, index as u8 + 1))
}

pub fn resource_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1))
}

pub fn watcher_ip(node: NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 4, node.0 as u8))
}

/// The force-release operators' node (server driver).
pub fn operator_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 5, 1))
}

pub fn probe_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 3, n))
}

/// Sends `request` and waits up to `timeout_ms` for the answer.
pub async fn call(
    ep: &Endpoint,
    ids: &AtomicU64,
    to: SocketAddr,
    request: Request,
    timeout_ms: u64,
) -> Option<Response> {
    let id = ids.fetch_add(1, Ordering::Relaxed);
    ep.send_to_raw(to, TAG_INBOUND, Box::new(Inbound::Request { id, request }))
        .await
        .ok()?;
    let answer = tokio::time::timeout(
        std::time::Duration::from_millis(timeout_ms),
        ep.recv_from_raw(id),
    )
    .await
    .ok()?
    .ok()?;
    answer.0.downcast::<Response>().ok().map(|b| *b)
}
