//! Where each simulated node lives on madsim's network.

use std::net::{IpAddr, Ipv4Addr};

/// A replica's client (Lock and Admin) port; its peer port is `real::PEER_PORT`.
pub const REPLICA_PORT: u16 = 7000;
/// The fenced resource's port.
pub const RESOURCE_PORT: u16 = 8000;

/// Replica `NodeId(n)` is at 10.0.0.n.
pub fn replica_ip(node: picket_core::paxos::NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, node.0 as u8))
}

/// Client `index` (0-based) is at 10.0.1.(index + 1).
pub fn client_ip(index: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, index as u8 + 1))
}

pub fn resource_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1))
}

pub fn probe_ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 3, n))
}

/// The watcher that follows replica `node`'s lock log.
pub fn watcher_ip(node: picket_core::paxos::NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 4, node.0 as u8))
}

/// The operator node that makes the membership change adding replica `node`.
pub fn reconfig_ip(node: picket_core::paxos::NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 6, node.0 as u8))
}

/// The force-release operators' node.
pub fn operator_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 5, 1))
}

/// The node an admin saves a backup from (`restore`).
pub fn backup_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 7, 1))
}
