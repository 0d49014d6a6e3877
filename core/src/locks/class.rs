//! The class registry: per namespace, key prefix -> class. The longest registered prefix of a key
//! names its class; the class at the empty prefix is the namespace's default, and a namespace with
//! none uses the built-in default (advisory, cluster TTL bounds).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::audit::{AuditAction, AuditRecord};
use super::command::{Actor, Reply, Role};
use super::config::LockConfig;
use super::error::LockError;
use super::lock::NamespaceState;
use super::names::{validate_class_name, validate_namespace, validate_prefix};
use super::watch::EventKind;
use super::LockStateMachine;

/// Longest owner / runbook URL / description, in bytes.
pub const OWNER_LEN_MAX: usize = 256;
pub const RUNBOOK_URL_LEN_MAX: usize = 2_048;
pub const DESCRIPTION_LEN_MAX: usize = 4_096;

/// A class: how locks under a key prefix behave and whom to call about them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassSpec {
    /// `[a-z0-9][a-z0-9-]{0,62}`.
    pub name: String,
    /// The key prefix this class covers; `""` is the namespace's default class.
    pub prefix: String,
    /// A fenced lock's resource checks tokens (a correctness lock); an advisory one does not.
    pub fenced: bool,
    /// The TTL the client library uses for sessions taking these locks.
    pub session_ttl_ms_default: u64,
    /// A session whose TTL is above this cannot acquire these keys.
    pub session_ttl_ms_max: u64,
    /// Holding longer than this is worth an alert (0: no threshold).
    pub hold_ms_max_expected: u64,
    pub owner: String,
    pub runbook_url: String,
    pub description: String,
}

impl ClassSpec {
    /// The class a namespace uses when none is registered at the empty prefix.
    pub fn builtin_default(config: &LockConfig) -> ClassSpec {
        ClassSpec {
            name: "default".to_owned(),
            prefix: String::new(),
            fenced: false,
            session_ttl_ms_default: config.session_ttl_ms_default,
            session_ttl_ms_max: config.session_ttl_ms_max,
            hold_ms_max_expected: 0,
            owner: String::new(),
            runbook_url: String::new(),
            description: "built-in default: advisory, cluster session TTL bounds".to_owned(),
        }
    }

    /// The plain safety statement shown to both people of a force-release.
    pub fn safety_statement(fenced: bool) -> &'static str {
        if fenced {
            "fenced lock: the resource will refuse the old holder's writes (its token and any lower) once a later holder has written"
        } else {
            "advisory lock: the resource does not check tokens, so releasing may let two writers in"
        }
    }

    /// Checks every rule of a class against the cluster's bounds.
    pub fn validate(&self, config: &LockConfig) -> Result<(), LockError> {
        validate_class_name(&self.name)?;
        validate_prefix(&self.prefix)?;
        let bad = |field: &'static str, rule: String| LockError::BadClass {
            class: self.name.clone(),
            field,
            rule,
        };
        if self.session_ttl_ms_default > self.session_ttl_ms_max {
            return Err(bad(
                "session_ttl_ms_default",
                format!(
                    "default session TTL {} ms is above its max session TTL {} ms",
                    self.session_ttl_ms_default, self.session_ttl_ms_max
                ),
            ));
        }
        let (min, max) = (config.session_ttl_ms_min, config.session_ttl_ms_max);
        for (what, field, ttl) in [
            (
                "default",
                "session_ttl_ms_default",
                self.session_ttl_ms_default,
            ),
            ("max", "session_ttl_ms_max", self.session_ttl_ms_max),
        ] {
            if ttl < min || ttl > max {
                return Err(bad(
                    field,
                    format!(
                        "{what} session TTL {ttl} ms is outside the cluster's bounds [{min}, {max}] ms"
                    ),
                ));
            }
        }
        check_len("class owner", &self.owner, OWNER_LEN_MAX)?;
        check_len("class runbook URL", &self.runbook_url, RUNBOOK_URL_LEN_MAX)?;
        check_len("class description", &self.description, DESCRIPTION_LEN_MAX)?;
        Ok(())
    }
}

pub(crate) fn check_len(field: &'static str, text: &str, max: usize) -> Result<(), LockError> {
    if text.len() > max {
        return Err(LockError::TextTooLong {
            field,
            len: text.len(),
            max,
        });
    }
    Ok(())
}

/// The classes of one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClassRegistry {
    /// prefix -> class; each class's `prefix` equals its key here.
    classes: BTreeMap<String, ClassSpec>,
    /// prefix length -> how many registered prefixes have it; lets a lookup try only the lengths
    /// in use, longest first (at most one map lookup per distinct length).
    prefix_lens: BTreeMap<usize, usize>,
}

impl ClassRegistry {
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.classes.len()
    }

    pub fn get(&self, prefix: &str) -> Option<&ClassSpec> {
        self.classes.get(prefix)
    }

    pub fn iter(&self) -> impl Iterator<Item = &ClassSpec> {
        self.classes.values()
    }

    /// The class of `key`: the longest registered prefix of it, if any.
    pub fn lookup(&self, key: &str) -> Option<&ClassSpec> {
        for &len in self.prefix_lens.keys().rev() {
            if len > key.len() || !key.is_char_boundary(len) {
                continue;
            }
            if let Some(class) = self.classes.get(&key[..len]) {
                return Some(class);
            }
        }
        None
    }

    /// Inserts or replaces; returns the class it replaced.
    pub fn put(&mut self, class: ClassSpec) -> Option<ClassSpec> {
        let len = class.prefix.len();
        let replaced = self.classes.insert(class.prefix.clone(), class);
        if replaced.is_none() {
            *self.prefix_lens.entry(len).or_insert(0) += 1;
        }
        replaced
    }

    pub fn remove(&mut self, prefix: &str) -> Option<ClassSpec> {
        let removed = self.classes.remove(prefix)?;
        let count = self
            .prefix_lens
            .get_mut(&prefix.len())
            .expect("a registered prefix's length is counted");
        *count -= 1;
        if *count == 0 {
            self.prefix_lens.remove(&prefix.len());
        }
        Some(removed)
    }

    /// O(n): the length index matches the map.
    pub fn check_invariants(&self) {
        let mut lens: BTreeMap<usize, usize> = BTreeMap::new();
        for (prefix, class) in &self.classes {
            assert_eq!(prefix, &class.prefix, "class stored under another prefix");
            *lens.entry(prefix.len()).or_insert(0) += 1;
        }
        assert_eq!(lens, self.prefix_lens, "prefix length index out of date");
    }
}

pub(crate) fn require_class_admin(actor: &Actor, action: &'static str) -> Result<(), LockError> {
    if actor.has_any(&[Role::ClassAdmin]) {
        Ok(())
    } else {
        Err(LockError::MissingRole {
            principal: actor.principal.clone(),
            action,
            needed: "class-admin",
        })
    }
}

impl LockStateMachine {
    /// `RecordSnapshotSave`: an audit record of a backup asked for by a class admin.
    pub(crate) fn apply_record_snapshot_save(&mut self, actor: Actor) -> Result<Reply, LockError> {
        require_class_admin(&actor, "save a backup of the state")?;
        self.audit.push(AuditRecord {
            reason: "a backup of the whole state (Admin.SaveSnapshot) at this revision or later"
                .to_owned(),
            actor_roles: actor.roles.clone(),
            ..AuditRecord::new(
                self.revision,
                self.time,
                actor.principal.clone(),
                AuditAction::SnapshotSaved,
                String::new(),
                String::new(),
            )
        });
        Ok(Reply::SnapshotSaveRecorded)
    }

    pub(crate) fn apply_put_class(
        &mut self,
        actor: Actor,
        namespace: String,
        class: ClassSpec,
    ) -> Result<Reply, LockError> {
        require_class_admin(&actor, "change classes")?;
        validate_namespace(&namespace)?;
        class.validate(&self.config)?;
        let max = self.config.classes_per_namespace_max;
        let registry = self
            .namespaces
            .get(namespace.as_str())
            .map(|ns| &ns.classes);
        let exists = registry.is_some_and(|r| r.get(&class.prefix).is_some());
        if !exists && registry.map_or(0, ClassRegistry::len) >= max {
            return Err(LockError::TooManyClasses { namespace, max });
        }
        let verb = if exists { "replaced" } else { "registered" };
        self.record_class_change(&actor, &namespace, &class, AuditAction::ClassPut, verb);
        let name: Arc<str> = Arc::from(namespace);
        let ns_state = self
            .namespaces
            .entry(name.clone())
            .or_insert_with(|| NamespaceState::new(name));
        let replaced = ns_state.classes.put(class).is_some();
        Ok(Reply::ClassPut { replaced })
    }

    pub(crate) fn apply_remove_class(
        &mut self,
        actor: Actor,
        namespace: String,
        prefix: String,
    ) -> Result<Reply, LockError> {
        require_class_admin(&actor, "change classes")?;
        validate_namespace(&namespace)?;
        validate_prefix(&prefix)?;
        let Some(ns_state) = self.namespaces.get_mut(namespace.as_str()) else {
            return Err(LockError::UnknownClass { namespace, prefix });
        };
        let Some(class) = ns_state.classes.remove(&prefix) else {
            return Err(LockError::UnknownClass { namespace, prefix });
        };
        if ns_state.is_empty() {
            self.namespaces.remove(namespace.as_str());
        }
        self.record_class_change(
            &actor,
            &namespace,
            &class,
            AuditAction::ClassRemoved,
            "removed",
        );
        Ok(Reply::ClassRemoved)
    }

    fn record_class_change(
        &mut self,
        actor: &Actor,
        namespace: &str,
        class: &ClassSpec,
        action: AuditAction,
        verb: &str,
    ) {
        self.audit.push(AuditRecord {
            fenced: Some(class.fenced),
            reason: format!("class `{}` {verb}", class.name),
            actor_roles: actor.roles.clone(),
            ..AuditRecord::new(
                self.revision,
                self.time,
                actor.principal.clone(),
                action,
                namespace.to_owned(),
                class.prefix.clone(),
            )
        });
        let kind = EventKind::ClassChanged {
            class: class.name.clone(),
            removed: action == AuditAction::ClassRemoved,
        };
        let (namespace, prefix) = (Arc::from(namespace), Arc::from(class.prefix.as_str()));
        self.watch
            .push(self.revision, self.time, &namespace, &prefix, kind, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, prefix: &str) -> ClassSpec {
        ClassSpec {
            name: name.to_owned(),
            prefix: prefix.to_owned(),
            ..ClassSpec::builtin_default(&LockConfig::default())
        }
    }

    #[test]
    fn longest_prefix_wins() {
        let mut registry = ClassRegistry::default();
        assert_eq!(registry.lookup("orders/1"), None);
        registry.put(class("all", ""));
        registry.put(class("orders", "orders/"));
        registry.put(class("big", "orders/big"));
        assert_eq!(registry.lookup("x").unwrap().name, "all");
        assert_eq!(registry.lookup("orders/1").unwrap().name, "orders");
        assert_eq!(registry.lookup("orders/big-7").unwrap().name, "big");
        assert_eq!(registry.lookup("orders").unwrap().name, "all");
        registry.remove("orders/");
        assert_eq!(registry.lookup("orders/1").unwrap().name, "all");
        registry.check_invariants();
        // A prefix length that splits a multi-byte character of the key is skipped, not a panic.
        registry.put(class("one", "é"));
        registry.put(class("odd", "x"));
        assert_eq!(registry.lookup("é").unwrap().name, "one");
        assert_eq!(registry.lookup("ü").unwrap().name, "all");
        registry.check_invariants();
    }

    #[test]
    fn validation_names_the_rule() {
        let config = LockConfig::default();
        assert_eq!(class("ok", "p/").validate(&config), Ok(()));
        let mut c = class("ok", "");
        c.session_ttl_ms_default = c.session_ttl_ms_max + 1;
        assert!(
            matches!(c.validate(&config), Err(LockError::BadClass { field: "session_ttl_ms_default", rule, .. }) if rule.contains("above its max"))
        );
        let mut c = class("ok", "");
        c.session_ttl_ms_max = config.session_ttl_ms_max + 1;
        assert!(
            matches!(c.validate(&config), Err(LockError::BadClass { field: "session_ttl_ms_max", rule, .. }) if rule.contains("outside the cluster's bounds"))
        );
        let mut c = class("ok", "");
        c.description = "d".repeat(DESCRIPTION_LEN_MAX + 1);
        assert!(matches!(
            c.validate(&config),
            Err(LockError::TextTooLong { .. })
        ));
        assert!(matches!(
            class("Bad", "").validate(&config),
            Err(LockError::BadName(_))
        ));
    }
}
