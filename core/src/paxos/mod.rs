//! The Multi-Paxos replica (being written).
