//! TLS (rustls through tonic) for the client and peer ports, when `[tls]` is configured.
//!
//! - Client port: the replica presents `cert`; with `require_client_cert` it also checks client
//!   certificates against `client_ca` (else `ca`), and the certificate's subject is the
//!   caller's principal (`crate::auth::cert`).
//! - HTTP port (`http = true`, the default): the replica presents `http_cert` (else `cert`); it
//!   asks for a client certificate (optional: scrapers and load balancers have none) and, when
//!   one is sent and verified, the inspection routes take it as the caller's credential.
//! - Peer port and peer connections: **mutual TLS**: each replica presents `cert` and accepts
//!   only a peer whose certificate chains to `ca`. A peer is verified by the host name of its
//!   `peer_address`, so the replica certificates must name it (DNS or IP SAN).
//!
//! Not compiled under `cfg(madsim)`: the simulator passes messages as values, without TLS.

use tonic::transport::{Certificate, ClientTlsConfig, Identity, Server, ServerTlsConfig};

use crate::config::Tls;
use crate::error::StartError;

/// The PEM files of `[tls]`, read once at start.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    files: Option<(Identity, Certificate, bool)>,
    /// The CA of client certificates (`client_ca`, else `ca`).
    client_ca: Option<Certificate>,
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
        let client_ca = match &tls.client_ca {
            Some(path) => Certificate::from_pem(read(path, "client_ca")?),
            None => ca.clone(),
        };
        Ok(TlsFiles {
            files: Some((identity, ca, tls.require_client_cert)),
            client_ca: Some(client_ca),
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
            let client_ca = self.client_ca.clone().unwrap_or_else(|| ca.clone());
            client_tls = client_tls.client_ca_root(client_ca);
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

/// The rustls configuration of the HTTP port, when `[tls]` is set and `http` is on.
pub fn http_server_config(
    tls: Option<&Tls>,
) -> Result<Option<std::sync::Arc<tokio_rustls::rustls::ServerConfig>>, StartError> {
    use std::sync::Arc;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::server::WebPkiClientVerifier;
    use tokio_rustls::rustls::{RootCertStore, ServerConfig};

    let Some(tls) = tls.filter(|t| t.http) else {
        return Ok(None);
    };
    let (cert_path, key_path, cert_field, key_field) = match (&tls.http_cert, &tls.http_key) {
        (Some(cert), Some(key)) => (cert, key, "http_cert", "http_key"),
        _ => (&tls.cert, &tls.key, "cert", "key"),
    };
    let bad = |field: &str, path: &std::path::Path, e: &dyn std::fmt::Display| {
        StartError::Tls(format!("tls.{field}: {}: {e}", path.display()))
    };
    let chain = CertificateDer::pem_slice_iter(&read(cert_path, cert_field)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(cert_field, cert_path, &e))?;
    if chain.is_empty() {
        return Err(bad(cert_field, cert_path, &"no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(key_path, key_field)?)
        .map_err(|e| bad(key_field, key_path, &e))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StartError::Tls(format!("http: {e}")))?;
    let builder = if tls.require_client_cert {
        let ca_path = tls.client_ca.as_ref().unwrap_or(&tls.ca);
        let ca_field = if tls.client_ca.is_some() {
            "client_ca"
        } else {
            "ca"
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&read(ca_path, ca_field)?) {
            let cert = cert.map_err(|e| bad(ca_field, ca_path, &e))?;
            roots.add(cert).map_err(|e| bad(ca_field, ca_path, &e))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| bad(ca_field, ca_path, &e))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| StartError::Tls(format!("tls.{cert_field}/{key_field}: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}
