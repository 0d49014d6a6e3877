//! Turning token claims into a principal and Picket roles.
//!
//! Role names (in `realm_access.roles` by default, or at a configured claim path):
//!
//! | claim value | core role | scope |
//! |---|---|---|
//! | `picket-operator` | `Role::OnCall` | every namespace |
//! | `picket-incident-commander` | `Role::IncidentCommander` | every namespace |
//! | `picket-admin` | `Role::ClassAdmin` | every namespace |
//! | `picket-operator:orders` (any of the above, `:` namespace) | same | namespace `orders` only |
//! | `picket-client` | (lock client: sessions, keepalives, acquire, release) | every namespace |
//! | `picket-client:orders` | same | namespace `orders` only |
//!
//! The lock-client role is checked at the edge only (`Authenticator::lock_caller`); the state
//! machine knows the operator roles.
//!
//! Other values (Keycloak adds `offline_access`, `uma_authorization`, ...) are ignored.

use std::collections::{BTreeMap, BTreeSet};

use picket_core::locks::{validate_namespace, Actor, Role};
use serde_json::Value;

use super::error::AuthError;

/// Longest principal accepted, in bytes (as core's identity fields).
pub const PRINCIPAL_LEN_MAX: usize = 256;
/// At most this many role values of a token are looked at (a token is a caller's input).
pub const ROLE_VALUES_MAX: usize = 256;

/// The claim name of a core role.
pub fn role_claim_name(role: Role) -> &'static str {
    match role {
        Role::OnCall => "picket-operator",
        Role::IncidentCommander => "picket-incident-commander",
        Role::ClassAdmin => "picket-admin",
    }
}

/// A claim value's role, if it is a Picket role name (`picket-...`, or, in dev metadata, the
/// short names `on-call`, `incident-commander`, `class-admin`).
pub fn parse_role_name(name: &str) -> Option<Role> {
    match name {
        "picket-operator" | "on-call" | "on_call" => Some(Role::OnCall),
        "picket-incident-commander" | "incident-commander" | "incident_commander" => {
            Some(Role::IncidentCommander)
        }
        "picket-admin" | "class-admin" | "class_admin" => Some(Role::ClassAdmin),
        _ => None,
    }
}

/// The claim name of the lock-client role (`picket-client`, or `picket-client:<namespace>`).
pub const LOCK_CLIENT_ROLE: &str = "picket-client";

/// Where the principal and roles are read from a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimConfig {
    /// The claim naming the principal (`preferred_username` by default; `sub` is the stable id).
    pub principal_claim: String,
    /// The path of the roles claim, as dot-separated object keys (`realm_access.roles` by
    /// default; e.g. `resource_access.picket.roles` for client roles, or `groups`).
    pub roles_claim_path: String,
}

impl Default for ClaimConfig {
    fn default() -> ClaimConfig {
        ClaimConfig {
            principal_claim: "preferred_username".to_owned(),
            roles_claim_path: "realm_access.roles".to_owned(),
        }
    }
}

/// How a caller was authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMethod {
    /// A verified OIDC bearer token.
    Oidc,
    /// `x-picket-principal` / `x-picket-roles` metadata, believed as is (development only).
    InsecureDev,
    /// A client certificate verified by the TLS layer (mutual TLS).
    Certificate,
}

/// Where a caller may act as a lock client (`picket-client`, `picket-client:<namespace>`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockRoles {
    /// `picket-client`: every namespace.
    pub every_namespace: bool,
    /// `picket-client:<namespace>`.
    pub namespaces: BTreeSet<String>,
}

impl LockRoles {
    /// Whether a lock call on `namespace` is allowed; `None` (a call that names no namespace:
    /// sessions, keepalives) needs any lock-client role.
    pub fn allows(&self, namespace: Option<&str>) -> bool {
        self.every_namespace
            || match namespace {
                Some(ns) => self.namespaces.contains(ns),
                None => !self.namespaces.is_empty(),
            }
    }
}

/// An authenticated caller: a principal with roles, some of them for one namespace only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub principal: String,
    /// Roles in every namespace.
    pub roles: BTreeSet<Role>,
    /// Roles in one namespace only (`picket-operator:orders`).
    pub namespace_roles: BTreeMap<String, BTreeSet<Role>>,
    /// Where the caller may take locks.
    pub lock_roles: LockRoles,
    pub method: AuthMethod,
}

impl Caller {
    /// The core actor for a command on `namespace` (its global roles plus that namespace's),
    /// or, with `None` (a command whose namespace is not known yet), the global roles only.
    pub fn actor(&self, namespace: Option<&str>) -> Actor {
        let mut roles = self.roles.clone();
        if let Some(scoped) = namespace.and_then(|ns| self.namespace_roles.get(ns)) {
            roles.extend(scoped.iter().copied());
        }
        Actor {
            principal: self.principal.clone(),
            roles,
        }
    }

    /// The actor for `namespace` if it has one of `needed`, else `PERMISSION_DENIED`
    /// (`missing_role`). The state machine checks roles again; this answers early and clearly.
    pub fn require(&self, needed: &[Role], namespace: Option<&str>) -> Result<Actor, AuthError> {
        let actor = self.actor(namespace);
        if actor.has_any(needed) {
            return Ok(actor);
        }
        Err(AuthError::MissingRole {
            principal: self.principal.clone(),
            needed: needed.to_vec(),
            namespace: namespace.map(str::to_owned),
        })
    }

    /// The caller's principal if it may make a lock call on `namespace`, else
    /// `PERMISSION_DENIED` (`missing_role`) naming `picket-client` (and
    /// `picket-client:<namespace>`).
    pub fn require_lock_role(&self, namespace: Option<&str>) -> Result<String, AuthError> {
        if self.lock_roles.allows(namespace) {
            return Ok(self.principal.clone());
        }
        Err(AuthError::MissingLockRole {
            principal: self.principal.clone(),
            namespace: namespace.map(str::to_owned),
        })
    }

    /// Adds every role of `other` (a certificate principal's configured extra roles).
    pub fn merge_roles(&mut self, other: &Caller) {
        self.roles.extend(other.roles.iter().copied());
        for (ns, roles) in &other.namespace_roles {
            self.namespace_roles
                .entry(ns.clone())
                .or_default()
                .extend(roles.iter().copied());
        }
        self.lock_roles.every_namespace |= other.lock_roles.every_namespace;
        self.lock_roles
            .namespaces
            .extend(other.lock_roles.namespaces.iter().cloned());
    }

    /// Adds the role named `value` (`picket-operator` or `picket-operator:orders`,
    /// `picket-client` or `picket-client:orders`); returns false (and adds nothing) if it is
    /// not a Picket role or names a bad namespace.
    pub fn add_role_value(&mut self, value: &str) -> bool {
        let (name, namespace) = match value.split_once(':') {
            Some((name, ns)) => (name, Some(ns)),
            None => (value, None),
        };
        if name == LOCK_CLIENT_ROLE {
            match namespace {
                None => self.lock_roles.every_namespace = true,
                Some(ns) if validate_namespace(ns).is_ok() => {
                    self.lock_roles.namespaces.insert(ns.to_owned());
                }
                Some(_) => return false,
            }
            return true;
        }
        let Some(role) = parse_role_name(name) else {
            return false;
        };
        match namespace {
            None => {
                self.roles.insert(role);
            }
            Some(ns) => {
                if validate_namespace(ns).is_err() {
                    return false;
                }
                self.namespace_roles
                    .entry(ns.to_owned())
                    .or_default()
                    .insert(role);
            }
        }
        true
    }
}

impl ClaimConfig {
    /// The caller described by verified `claims`.
    pub fn caller(&self, claims: &Value) -> Result<Caller, AuthError> {
        let principal = claims
            .get(&self.principal_claim)
            .and_then(Value::as_str)
            .filter(|p| !p.trim().is_empty() && p.len() <= PRINCIPAL_LEN_MAX)
            .ok_or_else(|| AuthError::NoPrincipal {
                claim: self.principal_claim.clone(),
            })?;
        let mut caller = Caller {
            principal: principal.to_owned(),
            roles: BTreeSet::new(),
            namespace_roles: BTreeMap::new(),
            lock_roles: LockRoles::default(),
            method: AuthMethod::Oidc,
        };
        for value in self.role_values(claims).take(ROLE_VALUES_MAX) {
            caller.add_role_value(value);
        }
        Ok(caller)
    }

    /// The strings at the roles claim path: an array of strings, or one string of
    /// space- or comma-separated names. A missing claim means no roles.
    fn role_values<'a>(&self, claims: &'a Value) -> Box<dyn Iterator<Item = &'a str> + 'a> {
        let mut at = claims;
        for part in self.roles_claim_path.split('.') {
            match at.get(part) {
                Some(next) => at = next,
                None => return Box::new(std::iter::empty()),
            }
        }
        match at {
            Value::Array(items) => Box::new(items.iter().filter_map(Value::as_str)),
            Value::String(s) => Box::new(
                s.split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|v| !v.is_empty()),
            ),
            _ => Box::new(std::iter::empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn realm_roles_map_to_core_roles_and_namespaces() {
        let claims = json!({
            "sub": "f81d", "preferred_username": "alice",
            "realm_access": {"roles": ["offline_access", "picket-operator:orders",
                                       "picket-admin", "picket-incident-commander:Bad NS"]}
        });
        let caller = ClaimConfig::default().caller(&claims).unwrap();
        assert_eq!(caller.principal, "alice");
        assert_eq!(caller.actor(None), Actor::new("alice", &[Role::ClassAdmin]));
        assert_eq!(
            caller.actor(Some("orders")),
            Actor::new("alice", &[Role::ClassAdmin, Role::OnCall])
        );
        assert_eq!(
            caller.actor(Some("billing")),
            Actor::new("alice", &[Role::ClassAdmin])
        );
        let denied = caller
            .require(&[Role::OnCall], Some("billing"))
            .unwrap_err();
        assert_eq!(denied.code(), tonic::Code::PermissionDenied);
        assert!(
            denied.to_string().contains("namespace `billing`"),
            "{denied}"
        );
        assert!(caller.require(&[Role::OnCall], Some("orders")).is_ok());
    }

    #[test]
    fn configured_principal_and_role_claims() {
        let config = ClaimConfig {
            principal_claim: "sub".to_owned(),
            roles_claim_path: "resource_access.picket.roles".to_owned(),
        };
        let claims = json!({"sub": "f81d", "preferred_username": "alice",
            "realm_access": {"roles": ["picket-admin"]},
            "resource_access": {"picket": {"roles": "picket-operator picket-incident-commander"}}});
        let caller = config.caller(&claims).unwrap();
        assert_eq!(
            caller.actor(None),
            Actor::new("f81d", &[Role::OnCall, Role::IncidentCommander])
        );
        let no_principal = json!({"preferred_username": "alice"});
        assert_eq!(
            config.caller(&no_principal).unwrap_err().rule(),
            "no_principal"
        );
        let no_roles = json!({"sub": "x"});
        assert!(config.caller(&no_roles).unwrap().roles.is_empty());
    }
}
