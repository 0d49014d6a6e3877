//! The node driver and the `picketd` / `picketctl` binaries.
//!
//! Nothing is here yet: this crate is filled by the server issue.

pub mod auth;
#[cfg(not(madsim))]
pub mod http;
pub mod metrics;
