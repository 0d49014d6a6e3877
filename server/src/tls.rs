//! TLS (rustls through tonic) for the client and peer ports, when `[tls]` is configured.
//!
//! - Client port: the replica presents `cert`; with `require_client_cert` it also checks client
//!   certificates against `ca`.
//! - Peer port and peer connections: **mutual TLS**: each replica presents `cert` and accepts
//!   only a peer whose certificate chains to `ca`. A peer is verified by the host name of its
//!   `peer_address`, so the replica certificates must name it (DNS or IP SAN).
//!
//! Not compiled under `cfg(madsim)`: the simulator passes messages as values, without TLS.

use tonic::transport::{Certificate, ClientTlsConfig, Identity, Server, ServerTlsConfig};

use crate::config::Tls;
use crate::server::StartError;

/// The PEM files of `[tls]`, read once at start.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    files: Option<(Identity, Certificate, bool)>,
}

fn read(path: &std::path::Path, field: &str) -> Result<Vec<u8>, StartError> {
    std::fs::read(path)
        .map_err(|e| StartError::Tls(format!("tls.{field}: {}: {e}", path.display())))
}

impl TlsFiles {
    pub fn load(tls: Option<&Tls>) -> Result<TlsFiles, StartError> {
        let Some(tls) = tls else {
            return Ok(TlsFiles::default());
        };
        let identity = Identity::from_pem(read(&tls.cert, "cert")?, read(&tls.key, "key")?);
        let ca = Certificate::from_pem(read(&tls.ca, "ca")?);
        Ok(TlsFiles {
            files: Some((identity, ca, tls.require_client_cert)),
        })
    }

    /// The client configuration for connecting to the peer at `address` (`host:port`).
    pub fn peer_client(&self, address: &str) -> Result<Option<ClientTlsConfig>, StartError> {
        let Some((identity, ca, _)) = &self.files else {
            return Ok(None);
        };
        let host = address
            .rsplit_once(':')
            .map_or(address, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        Ok(Some(
            ClientTlsConfig::new()
                .ca_certificate(ca.clone())
                .identity(identity.clone())
                .domain_name(host),
        ))
    }

    /// The client and peer server builders with TLS applied (unchanged without `[tls]`).
    pub fn servers(&self, client: Server, peer: Server) -> Result<(Server, Server), StartError> {
        let Some((identity, ca, require_client_cert)) = &self.files else {
            return Ok((client, peer));
        };
        let mut client_tls = ServerTlsConfig::new().identity(identity.clone());
        if *require_client_cert {
            client_tls = client_tls.client_ca_root(ca.clone());
        }
        let peer_tls = ServerTlsConfig::new()
            .identity(identity.clone())
            .client_ca_root(ca.clone());
        let tls_error = |e: tonic::transport::Error| StartError::Tls(e.to_string());
        Ok((
            client.tls_config(client_tls).map_err(tls_error)?,
            peer.tls_config(peer_tls).map_err(tls_error)?,
        ))
    }
}
