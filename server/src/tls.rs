//! TLS for the client, HTTP and peer ports, when `[tls]` is configured.
//!
//! - Client port (rustls through tonic): the replica presents `cert`; with `require_client_cert`
//!   it also checks client certificates against `client_ca` (else `ca`), and the certificate's
//!   subject is the caller's principal (`crate::auth::cert`).
//! - HTTP port (`http = true`, the default): the replica presents `http_cert` (else `cert`); it
//!   asks for a client certificate (optional: scrapers and load balancers have none) and, when
//!   one is sent and verified, the inspection routes take it as the caller's credential.
//! - Peer port and peer connections (rustls through tokio-rustls, [`PeerTls`]): **mutual TLS**:
//!   each replica presents `cert` and accepts only a peer whose certificate chains to `ca`. A
//!   peer is verified by the host name of its `peer_address`, so the replica certificates must
//!   name it (DNS or IP SAN). Both ends offer the ALPN protocol [`PEER_ALPN`].
//!
//! Not compiled under `cfg(madsim)`: the simulator runs its peers on plain madsim TCP.

use std::sync::Arc;

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

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

    /// The client port's server builder with TLS applied (unchanged without `[tls]`).
    pub fn client_server(&self, client: Server) -> Result<Server, StartError> {
        let Some((identity, ca, require_client_cert)) = &self.files else {
            return Ok(client);
        };
        let mut client_tls = ServerTlsConfig::new().identity(identity.clone());
        if *require_client_cert {
            let client_ca = self.client_ca.clone().unwrap_or_else(|| ca.clone());
            client_tls = client_tls.client_ca_root(client_ca);
        }
        client
            .tls_config(client_tls)
            .map_err(|e| StartError::Tls(e.to_string()))
    }
}

/// The ALPN protocol of the peer port (wire version 1 of `peer.proto`): a TLS client that
/// offers only others (a gRPC client offers `h2`) is refused in the TLS handshake.
pub const PEER_ALPN: &[u8] = b"picket-peer/1";

/// The peer port's mutual TLS, both ends (`[tls]` `cert`, `key`, `ca`).
#[derive(Clone)]
pub struct PeerTls {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls")
    }
}

impl PeerTls {
    /// Reads `[tls]` for the peer port; `None` without it.
    pub fn load(tls: Option<&Tls>) -> Result<Option<PeerTls>, StartError> {
        let Some(tls) = tls else {
            return Ok(None);
        };
        let chain = read_chain(&tls.cert, "cert")?;
        let key = read_key(&tls.key, "key")?;
        let roots = Arc::new(read_roots(&tls.ca, "ca")?);
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| bad("ca", &tls.ca, &e))?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| StartError::Tls(format!("peer port: {e}")))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| StartError::Tls(format!("tls.cert/key: {e}")))?;
        server.alpn_protocols = vec![PEER_ALPN.to_vec()];
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StartError::Tls(format!("peer connections: {e}")))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| StartError::Tls(format!("tls.cert/key: {e}")))?;
        client.alpn_protocols = vec![PEER_ALPN.to_vec()];
        Ok(Some(PeerTls {
            server: Arc::new(server),
            client: Arc::new(client),
        }))
    }

    /// The listening end.
    pub fn server(&self) -> PeerServerTls {
        PeerServerTls(TlsAcceptor::from(self.server.clone()))
    }

    /// The dialing end towards the member whose `peer_address` is `address` (`host:port`): its
    /// certificate must name `host`.
    pub fn client(&self, address: &str) -> Result<PeerClientTls, StartError> {
        let host = address
            .rsplit_once(':')
            .map_or(address, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            StartError::Tls(format!(
                "members[].peer_address `{address}`: `{host}` is not a host name a certificate \
                 can name: {e}"
            ))
        })?;
        Ok(PeerClientTls {
            connector: TlsConnector::from(self.client.clone()),
            name,
        })
    }
}

/// TLS for connections accepted on the peer port: the dialer must present a certificate that
/// chains to `ca`.
#[derive(Clone)]
pub struct PeerServerTls(TlsAcceptor);

impl std::fmt::Debug for PeerServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerServerTls")
    }
}

impl PeerServerTls {
    pub async fn accept(
        &self,
        tcp: tokio::net::TcpStream,
    ) -> std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
        self.0.accept(tcp).await
    }
}

/// TLS for a connection to one peer: its certificate must chain to `ca` and name its host.
#[derive(Clone)]
pub struct PeerClientTls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for PeerClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerClientTls({:?})", self.name)
    }
}

impl PeerClientTls {
    pub async fn connect(
        &self,
        tcp: tokio::net::TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        self.connector.connect(self.name.clone(), tcp).await
    }
}

fn bad(field: &str, path: &std::path::Path, e: &dyn std::fmt::Display) -> StartError {
    StartError::Tls(format!("tls.{field}: {}: {e}", path.display()))
}

fn read_chain(
    path: &std::path::Path,
    field: &str,
) -> Result<Vec<CertificateDer<'static>>, StartError> {
    let chain = CertificateDer::pem_slice_iter(&read(path, field)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(field, path, &e))?;
    if chain.is_empty() {
        return Err(bad(field, path, &"no certificate in the file"));
    }
    Ok(chain)
}

fn read_key(path: &std::path::Path, field: &str) -> Result<PrivateKeyDer<'static>, StartError> {
    PrivateKeyDer::from_pem_slice(&read(path, field)?).map_err(|e| bad(field, path, &e))
}

fn read_roots(path: &std::path::Path, field: &str) -> Result<RootCertStore, StartError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&read(path, field)?) {
        let cert = cert.map_err(|e| bad(field, path, &e))?;
        roots.add(cert).map_err(|e| bad(field, path, &e))?;
    }
    Ok(roots)
}

/// The console's transport certificate (`[console] client_cert` / `client_key`), read and
/// checked at start: both files parse, the key is the certificate's, and, when the client port
/// requires client certificates, the certificate chains to `client_ca` (else `ca`) and names a
/// principal as `client_principal_from` reads it (else every console call would be refused in
/// the handshake or as `bad_certificate`). The error names the field. `None` without it.
///
/// The console presents it only together with a signed-in person's access token, whose
/// principal and roles are the caller's (`crate::console`); its own principal is logged here.
pub fn console_client_identity(
    config: &crate::config::Config,
) -> Result<Option<crate::console::ClientIdentity>, StartError> {
    let console = &config.console;
    let (Some(cert_path), Some(key_path)) = (&console.client_cert, &console.client_key) else {
        return Ok(None);
    };
    let field_bad = |field: &str, path: &std::path::Path, e: &dyn std::fmt::Display| {
        StartError::Tls(format!("console.{field}: {}: {e}", path.display()))
    };
    let cert_pem = std::fs::read(cert_path).map_err(|e| field_bad("client_cert", cert_path, &e))?;
    let key_pem = std::fs::read(key_path).map_err(|e| field_bad("client_key", key_path, &e))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| field_bad("client_cert", cert_path, &e))?;
    let Some(leaf) = chain.first().cloned() else {
        return Err(field_bad(
            "client_cert",
            cert_path,
            &"no certificate in the file",
        ));
    };
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| field_bad("client_key", key_path, &e))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StartError::Tls(format!("console client: {e}")))?
        .with_root_certificates(RootCertStore::empty())
        .with_client_auth_cert(chain.clone(), key)
        .map_err(|e| {
            StartError::Tls(format!(
                "console.client_key: {}: not the key of console.client_cert {}: {e}",
                key_path.display(),
                cert_path.display()
            ))
        })?;
    if let Some(tls) = config.tls.as_ref().filter(|t| t.require_client_cert) {
        let (ca_path, ca_field) = match &tls.client_ca {
            Some(path) => (path, "client_ca"),
            None => (&tls.ca, "ca"),
        };
        let roots = Arc::new(read_roots(ca_path, ca_field)?);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| bad(ca_field, ca_path, &e))?;
        let now = tokio_rustls::rustls::pki_types::UnixTime::now();
        verifier
            .verify_client_cert(&leaf, &chain[1..], now)
            .map_err(|e| {
                field_bad(
                    "client_cert",
                    cert_path,
                    &format!("the client port would refuse it (tls.{ca_field}): {e}"),
                )
            })?;
        if let Some(certs) = config.certificate_auth().map_err(StartError::Auth)? {
            let caller = certs
                .caller(leaf.as_ref())
                .map_err(|e| field_bad("client_cert", cert_path, &e))?;
            tracing::info!(principal = %caller.principal,
                "the console presents its client certificate on the client ports, always \
                 with the signed-in person's token, whose principal and roles win");
        }
    }
    Ok(Some(crate::console::ClientIdentity { cert_pem, key_pem }))
}

/// The rustls configuration of the HTTP port, when `[tls]` is set and `http` is on.
pub fn http_server_config(tls: Option<&Tls>) -> Result<Option<Arc<ServerConfig>>, StartError> {
    let Some(tls) = tls.filter(|t| t.http) else {
        return Ok(None);
    };
    let (cert_path, key_path, cert_field, key_field) = match (&tls.http_cert, &tls.http_key) {
        (Some(cert), Some(key)) => (cert, key, "http_cert", "http_key"),
        _ => (&tls.cert, &tls.key, "cert", "key"),
    };
    let chain = read_chain(cert_path, cert_field)?;
    let key = read_key(key_path, key_field)?;
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
        let roots = read_roots(ca_path, ca_field)?;
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

#[cfg(test)]
mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };

    use super::*;

    /// A CA's PEM and its issuer.
    fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), Issuer::new(params, key))
    }

    /// A client certificate named `cn` signed by `issuer`: its PEM and its key's.
    fn client(issuer: &Issuer<'static, KeyPair>, cn: &str) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A replica's configuration requiring client certificates, with `[console] client_cert`
    /// and `client_key` at `cert` and `key` (in `dir`).
    fn config(dir: &std::path::Path, cert: &str, key: &str) -> crate::config::Config {
        let text = format!(
            "node_id = 1\ndata_dir = \"data\"\n\
             [[members]]\nid = 1\npeer_address = \"127.0.0.1:7411\"\nclient_address = \"127.0.0.1:7401\"\n\
             [[members]]\nid = 2\npeer_address = \"127.0.0.1:7412\"\nclient_address = \"127.0.0.1:7402\"\n\
             [[members]]\nid = 3\npeer_address = \"127.0.0.1:7413\"\nclient_address = \"127.0.0.1:7403\"\n\
             [oidc]\nissuer = \"https://sso.test/realms/ops\"\naudiences = [\"picket\"]\n\
             [oidc.console]\nclient_id = \"picket-console\"\n\
             [tls]\ncert = \"node.pem\"\nkey = \"node.key\"\nca = \"ca.pem\"\nrequire_client_cert = true\n\
             [console]\nclient_cert = {cert:?}\nclient_key = {key:?}\n"
        );
        let path = dir.join("picket.toml");
        std::fs::write(&path, text).unwrap();
        crate::config::Config::load(&path).unwrap()
    }

    fn refusal(config: &crate::config::Config) -> String {
        console_client_identity(config).unwrap_err().to_string()
    }

    #[test]
    fn the_consoles_certificate_is_checked_at_start_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        let (ca_pem, issuer) = ca("clients");
        let (_, stranger) = ca("stranger");
        write("ca.pem", &ca_pem);
        let (cert, key) = client(&issuer, "picket-console");
        write("console.pem", &cert);
        write("console.key", &key);
        let (other_cert, other_key) = client(&stranger, "picket-console");
        write("stranger.pem", &other_cert);
        write("stranger.key", &other_key);
        let (_, another_key) = client(&issuer, "someone-else");
        write("another.key", &another_key);
        write("garbage.pem", "not a certificate");

        let good = config(dir.path(), "console.pem", "console.key");
        let identity = console_client_identity(&good).unwrap().unwrap();
        assert_eq!(identity.cert_pem, cert.as_bytes());
        assert_eq!(identity.key_pem, key.as_bytes());

        let e = refusal(&config(dir.path(), "missing.pem", "console.key"));
        assert!(e.starts_with("tls: console.client_cert: "), "{e}");
        assert!(e.contains("missing.pem"), "{e}");
        let e = refusal(&config(dir.path(), "console.pem", "missing.key"));
        assert!(e.starts_with("tls: console.client_key: "), "{e}");
        let e = refusal(&config(dir.path(), "garbage.pem", "console.key"));
        assert!(e.starts_with("tls: console.client_cert: "), "{e}");
        assert!(e.contains("no certificate"), "{e}");
        // A key that is not the certificate's.
        let e = refusal(&config(dir.path(), "console.pem", "another.key"));
        assert!(e.starts_with("tls: console.client_key: "), "{e}");
        assert!(e.contains("not the key of console.client_cert"), "{e}");
        // Signed by a CA the client ports do not trust: every call would fail the handshake.
        let e = refusal(&config(dir.path(), "stranger.pem", "stranger.key"));
        assert!(e.starts_with("tls: console.client_cert: "), "{e}");
        assert!(
            e.contains("the client port would refuse it (tls.ca)"),
            "{e}"
        );
    }
}
