//! Why a replica did not start ([`StartError`]): the configuration, storage, a listener, the
//! identity provider or a TLS file, named in the message.

use std::net::SocketAddr;

use picket_core::paxos;
use thiserror::Error;

use crate::node::durable::StoreError;

/// Why a replica did not start.
#[derive(Debug, Error)]
pub enum StartError {
    #[error("storage in {dir}: {source}")]
    Store { dir: String, source: StoreError },
    #[error("replica configuration: {0}")]
    Replica(#[from] paxos::ConfigError),
    #[error("{field}: {rule}")]
    Address { field: &'static str, rule: String },
    #[error("cannot listen on {addr} ({what}): {source}")]
    Listen {
        addr: SocketAddr,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("oidc: {0}")]
    Auth(String),
    #[error("tls: {0}")]
    Tls(String),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}
