//! TLS to the replicas' client port, and telling a scheme mismatch from other failures.
//!
//! - [`TlsConfig`]: the CA bundle that signed the replicas' certificates (absent: the public
//!   web roots bundled with the library) and, for a cluster that requires client certificates
//!   (`[tls] require_client_cert`), this client's certificate chain and key, all PEM.
//! - Which endpoints use it: `https://host:port` always; a bare `host:port` when a
//!   [`TlsConfig`] is given (and plaintext otherwise); `http://host:port` never.
//! - [`TlsMismatch`]: what a failure looks like when the client speaks plaintext to a TLS port or
//!   TLS to a plaintext port, so that tools can say which flag is missing instead of a bare
//!   "transport error".
//!
//! Under `--cfg madsim` the simulator passes messages as values, without TLS: the configuration
//! is checked the same way but not applied.

use std::fmt;
use std::path::Path;

use super::error::ClientError;

/// TLS settings of a client. All certificates and keys are PEM.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// CA certificates the replicas' certificates must chain to (`None`: the public web roots).
    pub ca_pem: Option<Vec<u8>>,
    /// This client's certificate chain, presented when the server asks (mutual TLS).
    pub cert_pem: Option<Vec<u8>>,
    /// The private key of `cert_pem`.
    pub key_pem: Option<Vec<u8>>,
    /// The name the replicas' certificates are checked against (`None`: each endpoint's host).
    pub domain_name: Option<String>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key: configs end up in logs.
        f.debug_struct("TlsConfig")
            .field("ca_pem", &self.ca_pem.as_ref().map(|c| c.len()))
            .field("cert_pem", &self.cert_pem.as_ref().map(|c| c.len()))
            .field("key_pem", &self.key_pem.as_ref().map(|_| "<redacted>"))
            .field("domain_name", &self.domain_name)
            .finish()
    }
}

impl TlsConfig {
    /// Reads the files (`picketctl --ca/--cert/--key`). A certificate needs its key and the
    /// other way round.
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<TlsConfig, ClientError> {
        fn read(name: &'static str, path: Option<&Path>) -> Result<Option<Vec<u8>>, ClientError> {
            let Some(path) = path else {
                return Ok(None);
            };
            std::fs::read(path)
                .map(Some)
                .map_err(|e| ClientError::BadTls {
                    what: name,
                    reason: format!("cannot read {}: {e}", path.display()),
                })
        }
        let config = TlsConfig {
            ca_pem: read("ca", ca)?,
            cert_pem: read("cert", cert)?,
            key_pem: read("key", key)?,
            domain_name: None,
        };
        config.check()?;
        Ok(config)
    }

    /// The rules that do not need a connection: each file looks like PEM, cert and key together.
    pub(crate) fn check(&self) -> Result<(), ClientError> {
        match (&self.cert_pem, &self.key_pem) {
            (Some(_), None) => {
                return Err(ClientError::BadTls {
                    what: "key",
                    reason: "a client certificate needs its private key (--key)".into(),
                })
            }
            (None, Some(_)) => {
                return Err(ClientError::BadTls {
                    what: "cert",
                    reason: "a private key needs its client certificate (--cert)".into(),
                })
            }
            _ => {}
        }
        let pem = [
            ("ca", &self.ca_pem, "CERTIFICATE"),
            ("cert", &self.cert_pem, "CERTIFICATE"),
            ("key", &self.key_pem, "PRIVATE KEY"),
        ];
        for (what, bytes, label) in pem {
            let Some(bytes) = bytes else { continue };
            let text = String::from_utf8_lossy(bytes);
            if !text.contains("-----BEGIN ") || !text.contains(label) {
                return Err(ClientError::BadTls {
                    what,
                    reason: format!("not PEM: expected a `-----BEGIN ...{label}-----` block"),
                });
            }
        }
        Ok(())
    }

    /// The tonic client configuration.
    #[cfg(not(madsim))]
    pub(crate) fn tonic(&self) -> tonic::transport::ClientTlsConfig {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let mut tls = ClientTlsConfig::new();
        tls = match &self.ca_pem {
            Some(ca) => tls.ca_certificate(Certificate::from_pem(ca)),
            None => tls.with_webpki_roots(),
        };
        if let (Some(cert), Some(key)) = (&self.cert_pem, &self.key_pem) {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        if let Some(name) = &self.domain_name {
            tls = tls.domain_name(name.clone());
        }
        tls
    }
}

/// The scheme an endpoint is reached with: `https://` and `http://` as written; a bare
/// `host:port` is `https://` when the client has a [`TlsConfig`], else `http://`.
pub fn endpoint_uri_for(endpoint: &str, tls: bool) -> String {
    let trimmed = endpoint.trim().trim_end_matches('/');
    if trimmed.contains("://") {
        trimmed.to_owned()
    } else if tls {
        format!("https://{trimmed}")
    } else {
        format!("http://{trimmed}")
    }
}

/// A failure that comes from the two ends disagreeing about TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMismatch {
    /// Plaintext (`http://`) to a port that speaks TLS: use `https://` and a CA (`--ca`).
    PlaintextToTls,
    /// TLS (`https://`) to a port that speaks plaintext: use `http://` (or no `--ca`).
    TlsToPlaintext,
    /// The server's certificate is not trusted: the CA bundle (`--ca`) is missing or wrong.
    UntrustedServer,
    /// The server refused the handshake or closed the connection at once, as a server that
    /// requires a (valid) client certificate does (`--cert`/`--key`).
    ClientCertificateRequired,
}

impl TlsMismatch {
    /// What to do about it, naming the `picketctl` flags (the library fields are the same
    /// words: `TlsConfig::ca_pem`, `cert_pem`, `key_pem`).
    pub fn hint(self) -> &'static str {
        match self {
            TlsMismatch::PlaintextToTls => {
                "the connection broke as it does when plaintext is sent to a TLS port: if the \
                 cluster has [tls], use https:// endpoints and give its CA with --ca \
                 (PICKET_CA)"
            }
            TlsMismatch::TlsToPlaintext => {
                "the server speaks plaintext but this client used TLS: use http:// endpoints \
                 (and drop --ca/--cert/--key), or enable [tls] on the server"
            }
            TlsMismatch::UntrustedServer => {
                "the server's certificate is not trusted: give the CA that signed it with --ca \
                 (PICKET_CA), and check the endpoint's host name is in the certificate"
            }
            TlsMismatch::ClientCertificateRequired => {
                "the server refused or closed the TLS connection: if it requires client \
                 certificates, give one signed by its client CA with --cert and --key \
                 (PICKET_CERT, PICKET_KEY)"
            }
        }
    }

    /// The mismatch a failed call shows, from its error text (tonic, hyper, h2 and rustls
    /// words, as the transport reports them in a status's message and source chain) and
    /// whether the call used TLS: only plaintext calls can be `PlaintextToTls`, only TLS calls
    /// the others.
    pub fn for_call(text: &str, used_tls: bool) -> Option<TlsMismatch> {
        let text = text.to_ascii_lowercase();
        let any = |words: &[&str]| words.iter().any(|w| text.contains(w));
        if !used_tls {
            // A TLS server answers an HTTP/2 preface with a TLS alert or closes: h2 reads
            // garbage.
            let garbage = [
                "h2 protocol error",
                "frame with invalid size",
                "invalid http version",
                "invalid frame",
                "broken pipe",
                "connection reset",
                // The TLS server closes on the preface before h2 reads anything back.
                "connection closed",
            ];
            return any(&garbage).then_some(TlsMismatch::PlaintextToTls);
        }
        if any(&[
            "invalid peer certificate",
            "unknownissuer",
            "notvalidforname",
            "certificate expired",
        ]) {
            return Some(TlsMismatch::UntrustedServer);
        }
        if any(&[
            "invalidcontenttype",
            "corrupt message",
            "wrong version number",
        ]) {
            return Some(TlsMismatch::TlsToPlaintext);
        }
        // TLS 1.3: the client's handshake completes before the server checks its certificate,
        // so a refused (or missing) client certificate shows as an alert or a closed connection
        // on the first request.
        if any(&[
            "certificaterequired",
            "badcertificate",
            "unknownca",
            "handshakefailure",
            "connection closed",
            "broken pipe",
            "connection reset",
        ]) {
            return Some(TlsMismatch::ClientCertificateRequired);
        }
        None
    }
}

impl fmt::Display for TlsMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hint())
    }
}

/// A status's message and its source chain, `: `-separated (tonic puts the transport's reason
/// in the source, and its message alone often says only "transport error").
pub(crate) fn status_text(status: &tonic::Status) -> String {
    chain_text(
        status.message().to_owned(),
        std::error::Error::source(status),
    )
}

/// An error and its source chain, `: `-separated.
#[cfg(not(madsim))]
pub(crate) fn error_text(error: &dyn std::error::Error) -> String {
    chain_text(error.to_string(), error.source())
}

fn chain_text(first: String, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut text = first;
    let mut depth = 0;
    while let Some(error) = source {
        let part = error.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = error.source();
        depth += 1;
        if depth > 8 {
            break;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_endpoints_take_tls_from_the_config_and_schemes_are_kept() {
        assert_eq!(endpoint_uri_for("127.0.0.1:1", false), "http://127.0.0.1:1");
        assert_eq!(endpoint_uri_for("127.0.0.1:1", true), "https://127.0.0.1:1");
        assert_eq!(endpoint_uri_for("http://a:1/", true), "http://a:1");
        assert_eq!(endpoint_uri_for("https://a:1", false), "https://a:1");
    }

    #[test]
    fn a_certificate_needs_its_key_and_files_must_be_pem() {
        let cert_only = TlsConfig {
            cert_pem: Some(b"-----BEGIN CERTIFICATE-----\n".to_vec()),
            ..TlsConfig::default()
        };
        assert!(matches!(
            cert_only.check(),
            Err(ClientError::BadTls { what: "key", .. })
        ));
        let not_pem = TlsConfig {
            ca_pem: Some(b"hello".to_vec()),
            ..TlsConfig::default()
        };
        assert!(matches!(
            not_pem.check(),
            Err(ClientError::BadTls { what: "ca", .. })
        ));
        let missing = TlsConfig::from_files(Some(Path::new("/nonexistent/ca.pem")), None, None);
        assert!(
            matches!(&missing, Err(ClientError::BadTls { what: "ca", reason }) if reason.contains("/nonexistent/ca.pem")),
            "{missing:?}"
        );
        let key = TlsConfig {
            key_pem: Some(b"secret".to_vec()),
            ..TlsConfig::default()
        };
        assert!(!format!("{key:?}").contains("secret"));
    }

    #[test]
    fn mismatches_are_told_from_their_error_text() {
        for plain in [
            "h2 protocol error: http2 error",
            "transport error: connection error: stream closed because of a broken pipe",
        ] {
            assert_eq!(
                TlsMismatch::for_call(plain, false),
                Some(TlsMismatch::PlaintextToTls)
            );
        }
        let closed = "operation was canceled: transport error: connection closed";
        assert_eq!(
            TlsMismatch::for_call(closed, true),
            Some(TlsMismatch::ClientCertificateRequired)
        );
        // A plaintext client sees the same words when the TLS port closes on its preface
        // (seen in server/tests/tls_journey.rs): the hint is worded as a possibility.
        assert_eq!(
            TlsMismatch::for_call(closed, false),
            Some(TlsMismatch::PlaintextToTls)
        );
        let h2 = "transport error: http2 error: connection error detected: frame with invalid size";
        assert_eq!(
            TlsMismatch::for_call(h2, false),
            Some(TlsMismatch::PlaintextToTls)
        );
        assert_eq!(TlsMismatch::for_call(h2, true), None);
        let rustls = "transport error: received corrupt message of type InvalidContentType";
        assert_eq!(
            TlsMismatch::for_call(rustls, true),
            Some(TlsMismatch::TlsToPlaintext)
        );
        assert_eq!(TlsMismatch::for_call(rustls, false), None);
        let ca = "invalid peer certificate: UnknownIssuer";
        assert_eq!(
            TlsMismatch::for_call(ca, true),
            Some(TlsMismatch::UntrustedServer)
        );
        let no_cert = "received fatal alert: CertificateRequired";
        assert_eq!(TlsMismatch::for_call("connection refused", true), None);
        assert_eq!(
            TlsMismatch::for_call(no_cert, true),
            Some(TlsMismatch::ClientCertificateRequired)
        );
        assert_eq!(TlsMismatch::for_call("connection refused", false), None);
        assert!(TlsMismatch::PlaintextToTls.hint().contains("--ca"));
        assert!(TlsMismatch::ClientCertificateRequired
            .hint()
            .contains("--cert"));
    }
}
