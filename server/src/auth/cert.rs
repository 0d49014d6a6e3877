//! Client certificates (mutual TLS) as credentials: the verified certificate's subject becomes
//! the caller's principal, and the configuration gives certificate principals their roles.
//!
//! The TLS layer has already checked the chain against `[tls] client_ca` (else `ca`) before a
//! request arrives; here only the leaf certificate's names are read:
//!
//! - the principal is the first of `[tls] client_principal_from` the certificate has: its SAN URI
//!   (`san-uri`, e.g. a SPIFFE id), its SAN DNS name (`san-dns`), or its subject's common name
//!   (`cn`); default `["san-uri", "san-dns", "cn"]`;
//! - its roles are `[auth] certificate_roles` (default `["picket-client"]`: any verified
//!   certificate may take locks) plus its entry in `[auth.certificate_principal_roles]`, with the
//!   same role names as tokens (`picket-client:orders`, `picket-operator`, ...).
//!
//! Operator guide: docs/auth.md.

use std::collections::BTreeMap;

use serde::Deserialize;

#[cfg(not(madsim))]
use super::error::AuthError;
use super::roles::{AuthMethod, Caller, PRINCIPAL_LEN_MAX, ROLE_VALUES_MAX};

/// Where a certificate's principal is read from.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum PrincipalSource {
    /// The first URI subject alternative name (`spiffe://cluster/ns/orders/sa/billing`).
    SanUri,
    /// The first DNS subject alternative name.
    SanDns,
    /// The subject's common name.
    Cn,
}

impl PrincipalSource {
    pub fn name(self) -> &'static str {
        match self {
            PrincipalSource::SanUri => "san-uri",
            PrincipalSource::SanDns => "san-dns",
            PrincipalSource::Cn => "cn",
        }
    }
}

/// `client_principal_from`: one source or an ordered list of them.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum PrincipalFrom {
    One(PrincipalSource),
    List(Vec<PrincipalSource>),
}

impl Default for PrincipalFrom {
    fn default() -> PrincipalFrom {
        PrincipalFrom::List(vec![
            PrincipalSource::SanUri,
            PrincipalSource::SanDns,
            PrincipalSource::Cn,
        ])
    }
}

impl PrincipalFrom {
    pub fn sources(&self) -> Vec<PrincipalSource> {
        match self {
            PrincipalFrom::One(source) => vec![*source],
            PrincipalFrom::List(sources) => sources.clone(),
        }
    }
}

/// The role used when `[auth] certificate_roles` is not given.
pub const CERTIFICATE_ROLES_DEFAULT: &str = "picket-client";

/// How verified client certificates become callers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertAuth {
    /// Tried in order; the first the certificate has is the principal.
    pub principal_from: Vec<PrincipalSource>,
    /// The caller every verified certificate is (roles of every certificate principal).
    roles: Caller,
    /// Extra roles of some principals.
    principal_roles: BTreeMap<String, Caller>,
}

fn role_set(field: &str, values: &[String]) -> Result<Caller, String> {
    let mut caller = Caller {
        principal: String::new(),
        roles: Default::default(),
        namespace_roles: Default::default(),
        lock_roles: Default::default(),
        method: AuthMethod::Certificate,
    };
    if values.len() > ROLE_VALUES_MAX {
        return Err(format!("{field}: at most {ROLE_VALUES_MAX} roles"));
    }
    for value in values {
        if !caller.add_role_value(value) {
            return Err(format!(
                "{field}: unknown role `{value}` (known: picket-client, picket-operator, \
                 picket-incident-commander, picket-admin; `:namespace` to scope)"
            ));
        }
    }
    Ok(caller)
}

impl CertAuth {
    /// Checks every role name; the error names the field (`auth.certificate_roles: ...`).
    pub fn new(
        principal_from: &PrincipalFrom,
        certificate_roles: &[String],
        principal_roles: &BTreeMap<String, Vec<String>>,
    ) -> Result<CertAuth, String> {
        let sources = principal_from.sources();
        if sources.is_empty() {
            return Err(
                "tls.client_principal_from: name at least one of san-uri, san-dns, cn".into(),
            );
        }
        let roles = role_set("auth.certificate_roles", certificate_roles)?;
        let mut map = BTreeMap::new();
        for (principal, values) in principal_roles {
            let field = format!("auth.certificate_principal_roles.{principal:?}");
            if principal.trim().is_empty() || principal.len() > PRINCIPAL_LEN_MAX {
                return Err(format!(
                    "{field}: a principal is 1..={PRINCIPAL_LEN_MAX} bytes"
                ));
            }
            map.insert(principal.clone(), role_set(&field, values)?);
        }
        Ok(CertAuth {
            principal_from: sources,
            roles,
            principal_roles: map,
        })
    }

    /// The caller a verified leaf certificate (DER) proves: its principal and roles.
    #[cfg(not(madsim))]
    pub fn caller(&self, leaf_der: &[u8]) -> Result<Caller, AuthError> {
        let principal = principal_of(leaf_der, &self.principal_from)?;
        Ok(self.caller_named(principal))
    }

    /// The caller of a certificate whose principal is `principal`.
    pub fn caller_named(&self, principal: String) -> Caller {
        let mut caller = self.roles.clone();
        if let Some(extra) = self.principal_roles.get(&principal) {
            caller.merge_roles(extra);
        }
        caller.principal = principal;
        caller
    }
}

/// The principal of a certificate: the first of `sources` it has.
#[cfg(not(madsim))]
pub fn principal_of(leaf_der: &[u8], sources: &[PrincipalSource]) -> Result<String, AuthError> {
    use x509_parser::extensions::GeneralName;
    use x509_parser::prelude::{FromDer, X509Certificate};

    let bad = |why: String| AuthError::BadCertificate(why);
    let (_, cert) = X509Certificate::from_der(leaf_der)
        .map_err(|e| bad(format!("the client certificate does not parse: {e}")))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| bad(format!("its subjectAltName does not parse: {e}")))?;
    let names: Vec<&GeneralName> = san
        .map(|ext| ext.value.general_names.iter().collect())
        .unwrap_or_default();
    for source in sources {
        let found = match source {
            PrincipalSource::SanUri => names.iter().find_map(|n| match n {
                GeneralName::URI(uri) => Some(uri.to_string()),
                _ => None,
            }),
            PrincipalSource::SanDns => names.iter().find_map(|n| match n {
                GeneralName::DNSName(dns) => Some(dns.to_string()),
                _ => None,
            }),
            PrincipalSource::Cn => cert
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .map(str::to_owned),
        };
        if let Some(principal) = found.filter(|p| !p.trim().is_empty()) {
            if principal.len() > PRINCIPAL_LEN_MAX {
                return Err(bad(format!(
                    "its {} is {} bytes, at most {PRINCIPAL_LEN_MAX}",
                    source.name(),
                    principal.len()
                )));
            }
            return Ok(principal);
        }
    }
    let tried: Vec<&str> = sources.iter().map(|s| s.name()).collect();
    Err(bad(format!(
        "the client certificate has none of the names tls.client_principal_from looks for \
         ({})",
        tried.join(", ")
    )))
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    /// A self-signed certificate with `sans` and common name `cn` (the chain is the TLS
    /// layer's business; only names are read here).
    fn der(sans: Vec<SanType>, cn: Option<&str>) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = sans;
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn uri(text: &str) -> SanType {
        SanType::URI(text.try_into().unwrap())
    }

    fn dns(text: &str) -> SanType {
        SanType::DnsName(text.try_into().unwrap())
    }

    const ALL: &[PrincipalSource] = &[
        PrincipalSource::SanUri,
        PrincipalSource::SanDns,
        PrincipalSource::Cn,
    ];

    #[test]
    fn the_principal_is_the_first_configured_name_the_certificate_has() {
        let full = der(
            vec![dns("svc.orders.internal"), uri("spiffe://prod/sa/billing")],
            Some("billing-cn"),
        );
        assert_eq!(
            principal_of(&full, ALL).unwrap(),
            "spiffe://prod/sa/billing"
        );
        let dns_first = [PrincipalSource::SanDns, PrincipalSource::SanUri];
        assert_eq!(
            principal_of(&full, &dns_first).unwrap(),
            "svc.orders.internal"
        );
        assert_eq!(
            principal_of(&full, &[PrincipalSource::Cn]).unwrap(),
            "billing-cn"
        );
        let cn_only = der(vec![], Some("alice"));
        assert_eq!(principal_of(&cn_only, ALL).unwrap(), "alice");
        let dns_only = der(vec![dns("bob.ops")], Some("ignored"));
        assert_eq!(principal_of(&dns_only, ALL).unwrap(), "bob.ops");
    }

    #[test]
    fn a_certificate_without_the_configured_names_or_garbage_is_refused() {
        let cn_only = der(vec![], Some("alice"));
        let refused = principal_of(&cn_only, &[PrincipalSource::SanUri]).unwrap_err();
        assert_eq!(refused.rule(), "bad_certificate");
        assert!(refused.to_string().contains("san-uri"), "{refused}");
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        let garbage = principal_of(b"not a certificate", ALL).unwrap_err();
        assert_eq!(garbage.rule(), "bad_certificate");
    }

    #[test]
    fn certificate_principals_get_the_configured_roles() {
        let roles = BTreeMap::from([
            (
                "alice".to_owned(),
                vec!["picket-operator:orders".to_owned()],
            ),
            ("svc".to_owned(), vec!["picket-client".to_owned()]),
        ]);
        let certs = CertAuth::new(
            &PrincipalFrom::One(PrincipalSource::Cn),
            &["picket-client:orders".to_owned()],
            &roles,
        )
        .unwrap();
        let alice = certs.caller(&der(vec![], Some("alice"))).unwrap();
        assert_eq!(alice.principal, "alice");
        assert_eq!(alice.method, AuthMethod::Certificate);
        assert_eq!(alice.require_lock_role(Some("orders")).unwrap(), "alice");
        assert!(alice
            .require(&[picket_core::locks::Role::OnCall], Some("orders"))
            .is_ok());
        let refused = alice.require_lock_role(Some("billing")).unwrap_err();
        assert_eq!(refused.rule(), "missing_role");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(
            refused.to_string().contains("picket-client:billing"),
            "{refused}"
        );
        let svc = certs.caller(&der(vec![], Some("svc"))).unwrap();
        assert!(svc.require_lock_role(Some("billing")).is_ok());
        let bad = CertAuth::new(&PrincipalFrom::List(vec![]), &[], &BTreeMap::new());
        assert!(bad.unwrap_err().contains("client_principal_from"));
    }
}
