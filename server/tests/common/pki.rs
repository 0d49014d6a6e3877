//! Test certificates made at test time (rcgen): a CA, a replica certificate for 127.0.0.1 and
//! localhost (server and peer-client use), and client certificates whose principal is a SAN URI,
//! a SAN DNS name or a common name. Written as PEM files into a directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct Pem {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The CA and the files it signed.
pub struct TestPki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub node: Pem,
    issuer: Issuer<'static, KeyPair>,
}

/// How a client certificate names its principal.
#[derive(Clone, Copy, Debug)]
pub enum Name<'a> {
    /// A URI SAN (e.g. `spiffe://picket.test/alice`).
    Uri(&'a str),
    /// A DNS SAN.
    Dns(&'a str),
    /// The subject's common name only.
    Cn(&'a str),
}

impl TestPki {
    /// A new CA and replica certificate under `dir`.
    pub fn new(dir: &Path) -> TestPki {
        std::fs::create_dir_all(dir).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "picket-test-ca");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, cert.pem()).unwrap();
        let issuer = Issuer::new(params, key);
        let mut pki = TestPki {
            dir: dir.to_path_buf(),
            ca,
            node: Pem {
                cert: PathBuf::new(),
                key: PathBuf::new(),
            },
            issuer,
        };
        let mut node = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        node.subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        node.distinguished_name
            .push(DnType::CommonName, "picket-test-node");
        node.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        pki.node = pki.sign("node", node);
        pki
    }

    /// A client certificate named `name` (files `client-<file>.pem` / `.key`).
    pub fn client(&self, file: &str, name: Name<'_>) -> Pem {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        match name {
            Name::Uri(uri) => {
                params
                    .subject_alt_names
                    .push(SanType::URI(uri.try_into().unwrap()));
                params
                    .distinguished_name
                    .push(DnType::CommonName, "ignored-cn");
            }
            Name::Dns(dns) => {
                params
                    .subject_alt_names
                    .push(SanType::DnsName(dns.try_into().unwrap()));
                params
                    .distinguished_name
                    .push(DnType::CommonName, "ignored-cn");
            }
            Name::Cn(cn) => params.distinguished_name.push(DnType::CommonName, cn),
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(&format!("client-{file}"), params)
    }

    fn sign(&self, file: &str, params: CertificateParams) -> Pem {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let pem = Pem {
            cert: self.dir.join(format!("{file}.pem")),
            key: self.dir.join(format!("{file}.key")),
        };
        std::fs::write(&pem.cert, cert.pem()).unwrap();
        std::fs::write(&pem.key, key.serialize_pem()).unwrap();
        pem
    }
}
