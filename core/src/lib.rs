//! picket-core: the sans-IO heart of Picket.
//!
//! - [`paxos`]: a hand-written Multi-Paxos replica.
//! - [`locks`]: the deterministic lock state machine that applies what Paxos chooses.
//! - [`node`]: one replica: the Paxos replica, the lock state machine and leader-local session
//!   deadlines behind one sans-IO interface.
//! - [`time`]: time as a value; nothing in this crate reads a clock, spawns a thread, does IO or
//!   draws unseeded randomness (enforced by `core/clippy.toml`).

pub mod faults;
pub mod locks;
pub mod node;
pub mod paxos;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod time;
