//! Who is calling.
//!
//! **For now there is no real authentication** (OIDC for admin calls and TLS client identities
//! come in a later issue). A server started with `--insecure-dev-auth` (or
//! `insecure_dev_auth = true`; `picketd dev` always) believes the caller's metadata:
//!
//! - `x-picket-principal: alice` — the principal of an admin call, and of a lock client's
//!   session identity;
//! - `x-picket-roles: on-call,incident-commander,class-admin` — the admin call's roles.
//!
//! Without dev auth, admin **mutations** (classes, force-release) are refused with
//! `UNAUTHENTICATED`; reads (inspect, holds, classes, audit) are answered; lock clients'
//! sessions get the principal `unauthenticated`.

use picket_core::locks::{Actor, Role};
use tonic::metadata::MetadataMap;
use tonic::Status;

pub const PRINCIPAL_METADATA: &str = "x-picket-principal";
pub const ROLES_METADATA: &str = "x-picket-roles";
/// The principal of a lock client without dev auth (no authentication yet).
pub const UNAUTHENTICATED_PRINCIPAL: &str = "unauthenticated";
/// Longest principal taken from metadata.
const PRINCIPAL_LEN_MAX: usize = 256;

/// The authentication mode of a server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Auth {
    /// Believe `x-picket-principal` / `x-picket-roles` (development only).
    pub insecure_dev_auth: bool,
}

impl Auth {
    /// The principal recorded in a new session's identity.
    pub fn client_principal(&self, metadata: &MetadataMap) -> String {
        if !self.insecure_dev_auth {
            return UNAUTHENTICATED_PRINCIPAL.to_owned();
        }
        principal(metadata).unwrap_or_else(|| UNAUTHENTICATED_PRINCIPAL.to_owned())
    }

    /// The actor of an admin mutation, or `UNAUTHENTICATED` (with the reason).
    pub fn admin_actor(&self, metadata: &MetadataMap) -> Result<Actor, Status> {
        if !self.insecure_dev_auth {
            return Err(Status::unauthenticated(
                "admin changes need an authenticated operator: OIDC is not configured on this \
                 server (development servers started with --insecure-dev-auth take the \
                 x-picket-principal and x-picket-roles metadata)",
            ));
        }
        let Some(principal) = principal(metadata) else {
            return Err(Status::unauthenticated(format!(
                "{PRINCIPAL_METADATA}: required (1..={PRINCIPAL_LEN_MAX} bytes of ASCII)"
            )));
        };
        let mut roles = Vec::new();
        if let Some(value) = metadata.get(ROLES_METADATA) {
            let value = value
                .to_str()
                .map_err(|_| Status::unauthenticated(format!("{ROLES_METADATA}: must be ASCII")))?;
            for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                roles.push(parse_role(name)?);
            }
        }
        Ok(Actor::new(&principal, &roles))
    }
}

fn principal(metadata: &MetadataMap) -> Option<String> {
    let value = metadata.get(PRINCIPAL_METADATA)?.to_str().ok()?.trim();
    (!value.is_empty() && value.len() <= PRINCIPAL_LEN_MAX).then(|| value.to_owned())
}

fn parse_role(name: &str) -> Result<Role, Status> {
    match name {
        "on-call" | "on_call" => Ok(Role::OnCall),
        "incident-commander" | "incident_commander" => Ok(Role::IncidentCommander),
        "class-admin" | "class_admin" => Ok(Role::ClassAdmin),
        other => Err(Status::unauthenticated(format!(
            "{ROLES_METADATA}: unknown role `{other}` (known: on-call, incident-commander, \
             class-admin)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&'static str, &str)]) -> MetadataMap {
        let mut m = MetadataMap::new();
        for (k, v) in pairs {
            m.insert(*k, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn without_dev_auth_admin_changes_are_refused_and_metadata_ignored() {
        let auth = Auth::default();
        let md = metadata(&[(PRINCIPAL_METADATA, "alice"), (ROLES_METADATA, "on-call")]);
        let error = auth.admin_actor(&md).unwrap_err();
        assert_eq!(error.code(), tonic::Code::Unauthenticated);
        assert_eq!(auth.client_principal(&md), UNAUTHENTICATED_PRINCIPAL);
    }

    #[test]
    fn dev_auth_takes_principal_and_roles_from_metadata() {
        let auth = Auth {
            insecure_dev_auth: true,
        };
        let md = metadata(&[
            (PRINCIPAL_METADATA, "alice"),
            (ROLES_METADATA, "on-call, class-admin"),
        ]);
        let actor = auth.admin_actor(&md).unwrap();
        assert_eq!(
            actor,
            Actor::new("alice", &[Role::OnCall, Role::ClassAdmin])
        );
        assert_eq!(auth.client_principal(&md), "alice");
        let bad = metadata(&[(PRINCIPAL_METADATA, "bob"), (ROLES_METADATA, "root")]);
        assert!(auth
            .admin_actor(&bad)
            .unwrap_err()
            .message()
            .contains("root"));
        assert!(auth.admin_actor(&MetadataMap::new()).is_err());
    }
}
