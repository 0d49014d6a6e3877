//! The `picketd` configuration file (TOML), its defaults and its validation.
//!
//! Every error names the field at fault (`members[2].client_address: ...`). The reference with
//! every field is in docs/operations.md.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

mod sections;
pub use sections::*;

/// A configuration `picketd` refuses, naming the field.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{field}: {rule}")]
    Invalid { field: String, rule: String },
}

/// The shortest `[force_releases] ttl_ms`: a request must live long enough to be read.
pub const FORCE_RELEASE_TTL_MS_MIN: u64 = 1_000;

fn invalid(field: impl Into<String>, rule: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        rule: rule.into(),
    }
}

/// The whole file.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Names the cluster; peers refuse messages of another cluster.
    #[serde(default = "default_cluster_id")]
    pub cluster_id: String,
    /// This replica's id: one of `members[].id`.
    pub node_id: u64,
    /// Where this replica keeps its log, hard state and snapshots.
    pub data_dir: PathBuf,
    /// Address the `Lock` and `Admin` services listen on (default: this member's
    /// `client_address`).
    #[serde(default)]
    pub client_listen: Option<SocketAddr>,
    /// Address the `Peer` service listens on (default: this member's `peer_address`).
    #[serde(default)]
    pub peer_listen: Option<SocketAddr>,
    /// Believe the `x-picket-principal` / `x-picket-roles` metadata (development only).
    #[serde(default)]
    pub insecure_dev_auth: bool,
    /// OIDC bearer tokens for admin calls (docs/auth.md). Exclusive with `insecure_dev_auth`.
    #[serde(default)]
    pub oidc: Option<crate::auth::OidcSection>,
    /// Address of the HTTP listener (`/metrics`, `/v1/...` inspection); absent: no HTTP.
    #[serde(default)]
    pub http_listen: Option<SocketAddr>,
    /// The base URL people reach the cluster's HTTP port at (a load balancer or DNS name over the
    /// replicas, like Prometheus' `--web.external-url`): the alert links (`runbook_url`,
    /// `inspect_url`) are built on it. Absent: the first member's HTTP address
    /// ([`Config::external_url`]). Must be the same on every replica.
    #[serde(default)]
    pub external_url: Option<String>,
    /// Every replica of a new cluster, this one included: 3 or 5, the cluster's first
    /// membership (`picketd run --init` records it in the data directory, with the
    /// addresses). With `join`: this replica and 1 to 8 members of the running cluster it
    /// contacts (any of them, the leader or not; one that answers is enough). Once the data
    /// directory holds state, `members` is only whom to contact: the membership and every
    /// member's address come from the data directory and the log.
    pub members: Vec<Member>,
    /// `members` is a contact list, not a membership: a replica that joins a running cluster
    /// as a learner (added with `picketctl cluster add`, docs/runbooks/replace-machine.md), or
    /// one that lost its disk and comes back with `--rejoin` and a short list. The membership
    /// comes from the cluster. Leave it on afterwards (the membership is in the data directory
    /// from then on).
    #[serde(default)]
    pub join: bool,
    #[serde(default)]
    pub timing: Timing,
    #[serde(default)]
    pub sessions: Sessions,
    #[serde(default)]
    pub force_releases: ForceReleases,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub storage: StorageSection,
    #[serde(default)]
    pub tls: Option<Tls>,
    /// Roles of client-certificate principals (docs/auth.md).
    #[serde(default)]
    pub auth: AuthSection,
    /// `[console]`: the web console's options (docs/console.md).
    #[serde(default)]
    pub console: ConsoleSection,
    /// `[backup]`: scheduled backups of this replica's applied state (docs/operations.md,
    /// "Backups"); absent: none.
    #[serde(default)]
    pub backup: Option<BackupSection>,
    /// Planted bugs and injected faults (`picket_core::faults`): never read from the file (no
    /// key sets one), so picketd always runs with none. The simulation sets them on the parsed
    /// configuration; the replica's core, its log recovery, its driver and its peer transport
    /// read them from here.
    #[serde(skip)]
    pub faults: picket_core::faults::Faults,
}

fn default_cluster_id() -> String {
    "picket".to_owned()
}

impl Config {
    /// Reads and validates a file; relative paths in it are taken from the file's directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut config = Config::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_path_buf(),
                message,
            },
            other => other,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.resolve_paths(base);
        Ok(config)
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<config>"),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    fn resolve_paths(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix(&mut self.data_dir);
        if let Some(backup) = &mut self.backup {
            fix(&mut backup.dir);
        }
        if let Some(tls) = &mut self.tls {
            fix(&mut tls.cert);
            fix(&mut tls.key);
            fix(&mut tls.ca);
            for path in [&mut tls.client_ca, &mut tls.http_cert, &mut tls.http_key]
                .into_iter()
                .flatten()
            {
                fix(path);
            }
        }
        for path in [&mut self.console.client_cert, &mut self.console.client_key]
            .into_iter()
            .flatten()
        {
            fix(path);
        }
    }

    /// Checks every rule, naming the field of the first one broken.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.cluster_id.is_empty() || self.cluster_id.len() > 64 {
            return Err(invalid("cluster_id", "must be 1..=64 bytes"));
        }
        if let Some(backup) = &self.backup {
            if !(1..=604_800).contains(&backup.interval_s) {
                return Err(invalid("backup.interval_s", "must be 1..=604800 seconds"));
            }
            if !(1..=1_000).contains(&backup.keep) {
                return Err(invalid("backup.keep", "must be 1..=1000"));
            }
            if backup.dir.as_os_str().is_empty() {
                return Err(invalid(
                    "backup.dir",
                    "required: the directory backups go to",
                ));
            }
        }
        let count = self.members.len();
        if self.join && !(2..=picket_core::paxos::MEMBERS_MAX).contains(&count) {
            return Err(invalid(
                "members",
                format!(
                    "a joining replica lists itself and 1 to {} members to contact, got {count} \
                     entries",
                    picket_core::paxos::MEMBERS_MAX - 1
                ),
            ));
        }
        if !self.join && count != 3 && count != 5 {
            return Err(invalid(
                "members",
                format!(
                    "a cluster has 3 or 5 members, got {count} (a replica joining a running \
                     cluster says `join = true`)"
                ),
            ));
        }
        let mut ids = BTreeSet::new();
        for (i, m) in self.members.iter().enumerate() {
            if m.id == 0 {
                return Err(invalid(format!("members[{i}].id"), "must be non-zero"));
            }
            if !ids.insert(m.id) {
                return Err(invalid(
                    format!("members[{i}].id"),
                    format!("{} is listed twice", m.id),
                ));
            }
            check_host_port(&m.peer_address, &format!("members[{i}].peer_address"))?;
            check_host_port(&m.client_address, &format!("members[{i}].client_address"))?;
            if let Some(http) = &m.http_address {
                check_host_port(http, &format!("members[{i}].http_address"))?;
            }
        }
        if let Some(url) = &self.external_url {
            check_external_url(url)?;
        }
        if let Some(url) = &self.console.alertmanager_url {
            check_base_url("console.alertmanager_url", url)?;
        }
        if !ids.contains(&self.node_id) {
            return Err(invalid(
                "node_id",
                format!("{} is not one of members[].id {ids:?}", self.node_id),
            ));
        }
        let t = &self.timing;
        if t.heartbeat_ms == 0 {
            return Err(invalid("timing.heartbeat_ms", "must be non-zero"));
        }
        if t.election_timeout_ms_min <= t.heartbeat_ms {
            return Err(invalid(
                "timing.election_timeout_ms_min",
                format!("must be above heartbeat_ms ({})", t.heartbeat_ms),
            ));
        }
        if t.election_timeout_ms_max < t.election_timeout_ms_min {
            return Err(invalid(
                "timing.election_timeout_ms_max",
                "must be at least election_timeout_ms_min",
            ));
        }
        let lease = t.read_lease_ms();
        let margin =
            picket_core::paxos::lease_margin_ms(lease, picket_core::paxos::CLOCK_DRIFT_PPM_DEFAULT);
        if lease > 0 && lease <= t.heartbeat_ms + margin {
            return Err(invalid(
                "timing.read_mode",
                format!(
                    "lease needs election_timeout_ms_min ({lease}, the lease) above heartbeat_ms \
                     ({}) plus the {margin} ms clock-drift margin",
                    t.heartbeat_ms
                ),
            ));
        }
        let s = &self.sessions;
        if s.ttl_ms_min == 0 {
            return Err(invalid("sessions.ttl_ms_min", "must be non-zero"));
        }
        if s.ttl_ms_max < s.ttl_ms_min {
            return Err(invalid(
                "sessions.ttl_ms_max",
                "must be at least ttl_ms_min",
            ));
        }
        if s.ttl_ms_default < s.ttl_ms_min || s.ttl_ms_default > s.ttl_ms_max {
            return Err(invalid(
                "sessions.ttl_ms_default",
                "must be within [ttl_ms_min, ttl_ms_max]",
            ));
        }
        if self.force_releases.ttl_ms < FORCE_RELEASE_TTL_MS_MIN {
            return Err(invalid(
                "force_releases.ttl_ms",
                format!("must be at least {FORCE_RELEASE_TTL_MS_MIN} (1 s)"),
            ));
        }
        let l = &self.limits;
        for (value, field) in [
            (l.requests_queued_max, "limits.requests_queued_max"),
            (l.proposals_pending_max, "limits.proposals_pending_max"),
            (l.waits_max, "limits.waits_max"),
            (l.watch_streams_max, "limits.watch_streams_max"),
            (l.keepalive_streams_max, "limits.keepalive_streams_max"),
            (
                l.session_stream_requests_max,
                "limits.session_stream_requests_max",
            ),
            (l.window_slots, "limits.window_slots"),
            (l.batch_commands_max, "limits.batch_commands_max"),
        ] {
            if value == 0 {
                return Err(invalid(field, "must be non-zero"));
            }
        }
        let alpha = picket_core::paxos::RECONFIG_DELAY_SLOTS_DEFAULT;
        if l.window_slots > alpha {
            return Err(invalid(
                "limits.window_slots",
                format!(
                    "must be at most {alpha}: a leader proposes at most the reconfiguration delay \
                     (α = {alpha} slots, the same on every replica) beyond what it applied \
                     (docs/protocol.md, section 11)"
                ),
            ));
        }
        if let Some(tls) = &self.tls {
            if tls.http_cert.is_some() != tls.http_key.is_some() {
                return Err(invalid(
                    "tls.http_cert",
                    "http_cert and http_key go together",
                ));
            }
        }
        self.check_console_certificate()?;
        if let Err(rule) = self.certificate_auth() {
            let (field, rule) = rule.split_once(": ").unwrap_or(("auth", &rule));
            return Err(invalid(field, rule));
        }
        if self.lock_config().validate().is_err() {
            return Err(invalid(
                "sessions",
                "the TTL bounds do not fit the lock state machine",
            ));
        }
        Ok(())
    }

    /// `[console] client_cert` / `client_key`: both or neither, and only where the console
    /// presents them, next to a signed-in person's token: with `[tls]` and `[oidc.console]`.
    /// (With insecure dev auth a verified certificate, not the dev sign-in's metadata, is the
    /// caller, so the certificate's principal and roles would be every signed-in person's.)
    fn check_console_certificate(&self) -> Result<(), ConfigError> {
        let console = &self.console;
        if console.client_cert.is_none() && console.client_key.is_none() {
            return Ok(());
        }
        if console.client_cert.is_none() || console.client_key.is_none() {
            return Err(invalid(
                "console.client_cert",
                "client_cert and client_key go together",
            ));
        }
        if self.tls.is_none() {
            return Err(invalid(
                "console.client_cert",
                "needs [tls]: it is presented in the TLS handshake with the client port",
            ));
        }
        if self
            .oidc
            .as_ref()
            .and_then(|o| o.console.as_ref())
            .is_none()
        {
            return Err(invalid(
                "console.client_cert",
                "needs [oidc.console]: the console presents it only together with the \
                 signed-in person's access token, whose principal and roles win over the \
                 certificate's; without OIDC (insecure dev auth or none) the certificate's \
                 principal would be every signed-in person's",
            ));
        }
        Ok(())
    }

    /// Whether the console can call the client ports: not when they require client
    /// certificates and `[console] client_cert` is not set.
    pub fn console_client_cert_missing(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.require_client_cert)
            && self.console.client_cert.is_none()
    }

    /// This replica's member entry.
    pub fn me(&self) -> &Member {
        self.members
            .iter()
            .find(|m| m.id == self.node_id)
            .expect("validated: node_id is a member")
    }

    /// How the log records `member`: its ids and addresses (the HTTP one as
    /// [`Self::http_address_of`] gives it, `""` for none).
    pub fn member_address(&self, member: &Member) -> picket_core::paxos::MemberAddress {
        picket_core::paxos::MemberAddress {
            id: picket_core::paxos::NodeId(member.id),
            peer: member.peer_address.clone(),
            client: member.client_address.clone(),
            http: self.http_address_of(member).unwrap_or_default(),
        }
    }

    /// What `members` means for this file, in words (`picketd check-config`).
    pub fn members_meaning(&self) -> String {
        let others: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.id != self.node_id)
            .map(|m| m.id.to_string())
            .collect();
        if self.join {
            format!(
                "join = true: members {} are only whom to contact; any one running member is \
                 enough, the membership comes from the cluster",
                others.join(", ")
            )
        } else {
            format!(
                "the first membership of a new cluster (picketd run --init): voters {}; once the \
                 data directory holds state, members are only whom to contact",
                self.members_sorted_ids().join(", ")
            )
        }
    }

    fn members_sorted_ids(&self) -> Vec<String> {
        let mut ids: Vec<u64> = self.members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids.iter().map(u64::to_string).collect()
    }

    /// The cluster's first membership as this file gives it (`picketd run --init`): every
    /// member a voter, with its addresses.
    pub fn membership_first(&self) -> picket_core::paxos::Membership {
        picket_core::paxos::Membership {
            voters: self
                .members
                .iter()
                .map(|m| picket_core::paxos::NodeId(m.id))
                .collect(),
            addresses: self
                .members
                .iter()
                .map(|m| self.member_address(m))
                .collect(),
            ..picket_core::paxos::Membership::default()
        }
        .sorted()
    }

    /// The lock state machine's configuration.
    pub fn lock_config(&self) -> picket_core::locks::LockConfig {
        picket_core::locks::LockConfig {
            session_ttl_ms_min: self.sessions.ttl_ms_min,
            session_ttl_ms_max: self.sessions.ttl_ms_max,
            session_ttl_ms_default: self.sessions.ttl_ms_default,
            force_release_ttl_ms: self.force_releases.ttl_ms,
            ..picket_core::locks::LockConfig::default()
        }
    }

    /// How verified client certificates become callers, when `[tls] require_client_cert` is on
    /// (`None` otherwise). The error names the field.
    pub fn certificate_auth(&self) -> Result<Option<crate::auth::CertAuth>, String> {
        let Some(tls) = self.tls.as_ref().filter(|t| t.require_client_cert) else {
            return Ok(None);
        };
        crate::auth::CertAuth::new(
            &tls.client_principal_from,
            &self.auth.certificate_roles,
            &self.auth.certificate_principal_roles,
        )
        .map(Some)
    }

    /// The HTTP address (`host:port`) of `member`: its `http_address`, or else the host of its
    /// `client_address` with the port of this replica's `http_listen` (replicas usually listen on
    /// the same ports); `None` without either.
    pub fn http_address_of(&self, member: &Member) -> Option<String> {
        if let Some(http) = &member.http_address {
            return Some(http.clone());
        }
        let port = self.http_listen?.port();
        let (host, _) = member.client_address.rsplit_once(':')?;
        Some(format!("{host}:{port}"))
    }

    /// The HTTP base URL of every member that has one, by node id (`http://host:port`, or
    /// `https://` when the HTTP port serves TLS).
    pub fn http_endpoints(&self) -> std::collections::BTreeMap<u64, String> {
        self.members
            .iter()
            .filter_map(|m| {
                let address = self.http_address_of(m)?;
                Some((m.id, format!("{}://{address}", self.http_scheme())))
            })
            .collect()
    }

    /// The base URL of the alert links, without a trailing `/`: `external_url`, or else the
    /// first member's HTTP address (the same on every replica, and every replica answers
    /// inspection), `None` when neither is known.
    pub fn external_url(&self) -> Option<String> {
        match &self.external_url {
            Some(url) => Some(url.trim_end_matches('/').to_owned()),
            None => {
                let first = self.members.iter().min_by_key(|m| m.id)?;
                let address = self.http_address_of(first)?;
                Some(format!("{}://{address}", self.http_scheme()))
            }
        }
    }

    /// The URL scheme of the HTTP port: `https` when `[tls] http` is on.
    pub fn http_scheme(&self) -> &'static str {
        if self.tls.as_ref().is_some_and(|t| t.http) {
            "https"
        } else {
            "http"
        }
    }

    /// The URL scheme of this cluster's endpoints.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

fn check_host_port(value: &str, field: &str) -> Result<(), ConfigError> {
    if !value.contains(':') {
        return Err(invalid(field, format!("`{value}` must be host:port")));
    }
    if !is_host_port(value) {
        return Err(invalid(
            field,
            format!("`{value}` must be host:port with a port in 1..=65535"),
        ));
    }
    Ok(())
}

/// `value` is `host:port`: a host that is not empty and a port in 1..=65535 (the rule of the
/// config file's addresses and of the addresses `Admin.AddMember` takes).
pub fn is_host_port(value: &str) -> bool {
    value
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0))
}

/// `external_url`: an absolute `http://` or `https://` URL with a host, without query or
/// fragment (links are built by appending paths to it).
fn check_external_url(url: &str) -> Result<(), ConfigError> {
    check_base_url("external_url", url)
}

/// `field`: an absolute `http://` or `https://` URL with a host, without query or fragment
/// (paths are appended to it).
pub fn check_base_url(field: &str, url: &str) -> Result<(), ConfigError> {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(invalid(
            field,
            format!("`{url}` must start with http:// or https://"),
        ));
    };
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() {
        return Err(invalid(field, format!("`{url}` has no host")));
    }
    if url.contains(['?', '#']) || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            field,
            format!("`{url}` must not have a query, a fragment or spaces"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
