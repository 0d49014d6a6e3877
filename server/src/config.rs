//! The `picketd` configuration file (TOML), its defaults and its validation.
//!
//! Every error names the field at fault (`members[2].client_address: ...`). The reference with
//! every field is in docs/operations.md.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

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
}

/// `[backup]`: every `interval_s`, while it serves, the replica writes a backup file of its
/// applied state (one revision, as `picketctl snapshot save` writes it) into `dir`, keeping the
/// newest `keep` of its own.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BackupSection {
    /// Where the files go (created if missing): `picket-<cluster_id>-node<id>-<unix ms>.pkbk`.
    pub dir: PathBuf,
    /// Seconds between backups (1..=604800; default 3600). The first is taken one interval
    /// after the start, or 60 s after it if that is sooner.
    #[serde(default = "backup_interval_s_default")]
    pub interval_s: u64,
    /// Backup files of this replica kept in `dir` (1..=1000; default 24); older ones are removed
    /// after each good backup.
    #[serde(default = "backup_keep_default")]
    pub keep: usize,
}

fn backup_interval_s_default() -> u64 {
    3_600
}

fn backup_keep_default() -> usize {
    24
}

/// `[console]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleSection {
    /// The Alertmanager whose API v2 (`GET <url>/api/v2/alerts`) the console reads Picket's
    /// firing alerts from, e.g. `http://alertmanager.internal:9093`. Absent (the default): the
    /// console shows no alerts and says so.
    pub alertmanager_url: Option<String>,
    /// The console's transport certificate chain (PEM), presented on its connections to the
    /// replicas' client ports, which ask for one with `[tls] require_client_cert`. Only ever
    /// sent together with the signed-in person's OIDC access token, whose principal and roles
    /// win over the certificate's (docs/auth.md), so it needs `[tls]` and `[oidc.console]`.
    pub client_cert: Option<PathBuf>,
    /// The private key of `client_cert` (PEM).
    pub client_key: Option<PathBuf>,
}

/// `[auth]`: what a verified client certificate may do (with `[tls] require_client_cert`).
/// Certificates carry no roles, so they are configured here; tokens bring their own.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSection {
    /// Roles of every verified client certificate (default `["picket-client"]`: any
    /// certificate signed by the client CA may take locks in every namespace; `[]`: none).
    pub certificate_roles: Vec<String>,
    /// More roles of some certificate principals, by principal (`"spiffe://prod/sa/alice" =
    /// ["picket-operator"]`), with the role names of tokens.
    pub certificate_principal_roles: std::collections::BTreeMap<String, Vec<String>>,
}

impl Default for AuthSection {
    fn default() -> AuthSection {
        AuthSection {
            certificate_roles: vec![crate::auth::cert::CERTIFICATE_ROLES_DEFAULT.to_owned()],
            certificate_principal_roles: Default::default(),
        }
    }
}

fn default_cluster_id() -> String {
    "picket".to_owned()
}

/// One replica of the cluster.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub id: u64,
    /// `host:port` other replicas connect to.
    pub peer_address: String,
    /// `host:port` clients connect to (also the leader hint other replicas give).
    pub client_address: String,
    /// `host:port` of the member's HTTP listener, as the other replicas (which forward
    /// inspection reads to the leader) and people reach it. Absent: the host of
    /// `client_address` with the port of this replica's `http_listen`
    /// ([`Config::http_address_of`]).
    #[serde(default)]
    pub http_address: Option<String>,
}

/// Election and heartbeat timing.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Timing {
    pub election_timeout_ms_min: u64,
    pub election_timeout_ms_max: u64,
    pub heartbeat_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            election_timeout_ms_min: 300,
            election_timeout_ms_max: 600,
            heartbeat_ms: 75,
        }
    }
}

/// Session TTL bounds (cluster-wide; part of the replicated state, so equal on every member).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Sessions {
    pub ttl_ms_min: u64,
    pub ttl_ms_max: u64,
    pub ttl_ms_default: u64,
}

impl Default for Sessions {
    fn default() -> Self {
        let d = picket_core::locks::LockConfig::default();
        Sessions {
            ttl_ms_min: d.session_ttl_ms_min,
            ttl_ms_max: d.session_ttl_ms_max,
            ttl_ms_default: d.session_ttl_ms_default,
        }
    }
}

/// Force-release requests (part of the replicated state, so equal on every member).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ForceReleases {
    /// How long a request stays approvable (log time), in ms.
    pub ttl_ms: u64,
}

impl Default for ForceReleases {
    fn default() -> Self {
        ForceReleases {
            ttl_ms: picket_core::locks::LockConfig::default().force_release_ttl_ms,
        }
    }
}

/// Bounds on queues and streams.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Client requests queued for the node at most.
    pub requests_queued_max: usize,
    /// Proposals waiting for a slot at most (the core's `pending_max`).
    pub proposals_pending_max: usize,
    /// `Acquire` calls held open for a grant at most.
    pub waits_max: usize,
    pub watch_streams_max: usize,
    pub keepalive_streams_max: usize,
    /// Requests in flight on one `Session` stream at most (keepalives not counted).
    pub session_stream_requests_max: usize,
    /// Paxos slots in flight at most.
    pub window_slots: usize,
    /// Commands per slot at most.
    pub batch_commands_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            requests_queued_max: 10_000,
            proposals_pending_max: 10_000,
            waits_max: 10_000,
            watch_streams_max: 1_024,
            keepalive_streams_max: 10_000,
            session_stream_requests_max: 1_024,
            window_slots: 64,
            batch_commands_max: 256,
        }
    }
}

/// Storage tuning.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSection {
    /// Take a snapshot and compact the log every this many applied slots (0: never). The
    /// snapshot file is written by a background save (`crate::node::durable`).
    pub snapshot_every_slots: u64,
    /// Bytes zero-filled ahead of the log's data (0: none).
    pub preallocate_bytes: u64,
    /// Where group commits are written: `"inline"` (default: in the driver's turn) or
    /// `"thread"` (a dedicated persist thread, double-buffered with the driver;
    /// `crate::node::persist`). docs/PERFORMANCE.md has the A/B that chose the default.
    pub persist: PersistMode,
}

/// Where the driver's group commits are written (`[storage] persist`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PersistMode {
    /// In the driver's turn: the driver waits for the fdatasync, then goes on.
    #[default]
    Inline,
    /// On a persist thread: the driver goes on while the fdatasync runs, and what arrives
    /// meanwhile forms the next group commit. (The simulation always persists inline.)
    Thread,
}

impl Default for StorageSection {
    fn default() -> Self {
        StorageSection {
            snapshot_every_slots: 10_000,
            preallocate_bytes: 4 << 20,
            persist: PersistMode::Inline,
        }
    }
}

/// TLS files (PEM). With a `[tls]` section clients connect with `https://`, and replicas use
/// mutual TLS among themselves: each presents `cert` and checks the other's against `ca`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// This replica's certificate chain (server and peer-client certificate).
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA that signed the replicas' certificates.
    pub ca: PathBuf,
    /// Also require client certificates signed by `client_ca` (else `ca`) on the client port;
    /// a certificate's subject is then its caller's principal (docs/auth.md).
    #[serde(default)]
    pub require_client_cert: bool,
    /// The CA that signs client certificates, if not `ca` (so that a replica's own certificate
    /// is not a client credential).
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Where a client certificate's principal is read: `"san-uri"`, `"san-dns"`, `"cn"`, or an
    /// ordered list of them (default `["san-uri", "san-dns", "cn"]`: the first one present).
    #[serde(default)]
    pub client_principal_from: crate::auth::PrincipalFrom,
    /// The HTTP port (`http_listen`) serves TLS too (default true), with `http_cert`/`http_key`
    /// if given, else `cert`/`key`. It asks for, but does not require, client certificates.
    #[serde(default = "default_true")]
    pub http: bool,
    #[serde(default)]
    pub http_cert: Option<PathBuf>,
    #[serde(default)]
    pub http_key: Option<PathBuf>,
}

fn default_true() -> bool {
    true
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
mod tests {
    use super::*;

    const GOOD: &str = r#"
node_id = 2
data_dir = "data"
[[members]]
id = 1
peer_address = "127.0.0.1:7411"
client_address = "127.0.0.1:7401"
[[members]]
id = 2
peer_address = "127.0.0.1:7412"
client_address = "127.0.0.1:7402"
[[members]]
id = 3
peer_address = "127.0.0.1:7413"
client_address = "127.0.0.1:7403"
[timing]
election_timeout_ms_min = 100
election_timeout_ms_max = 200
heartbeat_ms = 20
"#;

    /// What docs/operations.md says a join file may hold ("What a join file holds"), and what
    /// `picketd check-config` then says the file's members mean.
    #[test]
    fn a_join_file_lists_itself_and_one_to_eight_contacts() {
        // Itself and one contact (node 3): valid, and said to be only whom to contact.
        let one = GOOD
            .replace("node_id = 2", "join = true\nnode_id = 2")
            .replacen(
                "[[members]]\nid = 1\npeer_address = \"127.0.0.1:7411\"\nclient_address = \"127.0.0.1:7401\"\n",
                "",
                1,
            );
        let config = Config::parse(&one).unwrap();
        assert_eq!(config.members.len(), 2);
        let said = config.members_meaning();
        assert!(
            said.starts_with("join = true: members 3 are only whom to contact"),
            "{said}"
        );
        // Itself alone: refused, naming the rule.
        let alone = one.replacen(
            "[[members]]\nid = 3\npeer_address = \"127.0.0.1:7413\"\nclient_address = \"127.0.0.1:7403\"\n",
            "",
            1,
        );
        let e = error_of(&alone);
        assert!(
            e.starts_with("members: a joining replica lists itself and 1 to 8 members"),
            "{e}"
        );
        // Its own entry is required (its addresses come from it).
        let e = error_of(&one.replace("node_id = 2", "node_id = 4"));
        assert!(e.starts_with("node_id: "), "{e}");
        // Without join: 3 or 5, the first membership, recorded with the addresses by --init.
        let first = Config::parse(GOOD).unwrap();
        assert!(first.members_meaning().contains("voters 1, 2, 3"));
        let m = first.membership_first();
        assert_eq!(m.voters.len(), 3);
        assert_eq!(m.addresses[2].peer, "127.0.0.1:7413");
        assert_eq!(m.validate(), Ok(()));
        let e = error_of(&alone.replace("join = true\n", ""));
        assert!(
            e.starts_with("members: a cluster has 3 or 5 members"),
            "{e}"
        );
    }

    #[test]
    fn a_good_file_parses_with_defaults() {
        let config = Config::parse(GOOD).unwrap();
        assert_eq!(config.me().client_address, "127.0.0.1:7402");
        assert_eq!(config.cluster_id, "picket");
        assert_eq!(config.timing.heartbeat_ms, 20);
        assert_eq!(config.limits, Limits::default());
    }

    fn error_of(text: &str) -> String {
        Config::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_backup_section_has_defaults_and_bounds() {
        assert_eq!(Config::parse(GOOD).unwrap().backup, None);
        let with = format!("{GOOD}[backup]\ndir = \"backups\"\n");
        let backup = Config::parse(&with).unwrap().backup.unwrap();
        assert_eq!((backup.interval_s, backup.keep), (3_600, 24));
        let e = error_of(&format!("{with}interval_s = 0\n"));
        assert!(e.starts_with("backup.interval_s: "), "{e}");
        let e = error_of(&format!("{with}keep = 0\n"));
        assert!(e.starts_with("backup.keep: "), "{e}");
        let e = error_of(&format!("{GOOD}[backup]\ndir = \"\"\n"));
        assert!(e.starts_with("backup.dir: "), "{e}");
    }

    #[test]
    fn errors_name_the_field() {
        let e = error_of(&GOOD.replace("node_id = 2", "node_id = 9"));
        assert!(e.starts_with("node_id: "), "{e}");
        let e = error_of(&GOOD.replace("127.0.0.1:7403", "nowhere"));
        assert!(e.starts_with("members[2].client_address: "), "{e}");
        let e = error_of(&GOOD.replace("heartbeat_ms = 20", "heartbeat_ms = 100"));
        assert!(e.starts_with("timing.election_timeout_ms_min: "), "{e}");
        let e = error_of(&GOOD.replace("id = 3", "id = 1"));
        assert!(e.starts_with("members[2].id: "), "{e}");
        let e = error_of(&format!("{GOOD}\n[sessions]\nttl_ms_default = 0\n"));
        assert!(e.contains("sessions.ttl_ms_default"), "{e}");
        let e = error_of(&format!("{GOOD}\n[force_releases]\nttl_ms = 10\n"));
        assert!(e.starts_with("force_releases.ttl_ms: "), "{e}");
        let e = error_of(&format!("{GOOD}\n[limits]\nwindow_slots = 65\n"));
        assert!(
            e.starts_with("limits.window_slots: must be at most 64"),
            "{e}"
        );
        let e = error_of(&format!("colour = 1\n{GOOD}"));
        assert!(e.contains("colour"), "{e}");
        let e = error_of(&GOOD.replace(
            "client_address = \"127.0.0.1:7403\"",
            "client_address = \"127.0.0.1:7403\"\nhttp_address = \"127.0.0.1\"",
        ));
        assert!(e.starts_with("members[2].http_address: "), "{e}");
        for bad in [
            "picket.internal:7480",
            "http://",
            "https://x/?a=1",
            "http://x/#k",
        ] {
            let e = error_of(&format!("external_url = {bad:?}\n{GOOD}"));
            assert!(e.starts_with("external_url: "), "{bad}: {e}");
        }
    }

    #[test]
    fn the_persist_mode_is_inline_unless_the_thread_is_chosen() {
        assert_eq!(
            Config::parse(GOOD).unwrap().storage.persist,
            PersistMode::Inline
        );
        let thread = format!("{GOOD}\n[storage]\npersist = \"thread\"\n");
        assert_eq!(
            Config::parse(&thread).unwrap().storage.persist,
            PersistMode::Thread
        );
        let e = error_of(&format!("{GOOD}\n[storage]\npersist = \"async\"\n"));
        assert!(
            e.contains("storage.persist") || e.contains("persist"),
            "{e}"
        );
        assert!(e.contains("inline") && e.contains("thread"), "{e}");
    }

    #[test]
    fn the_console_reads_alerts_only_from_a_configured_alertmanager_url() {
        assert_eq!(Config::parse(GOOD).unwrap().console.alertmanager_url, None);
        let with = format!("{GOOD}\n[console]\nalertmanager_url = \"http://127.0.0.1:9093\"\n");
        assert_eq!(
            Config::parse(&with)
                .unwrap()
                .console
                .alertmanager_url
                .as_deref(),
            Some("http://127.0.0.1:9093")
        );
        let e = error_of(&format!(
            "{GOOD}\n[console]\nalertmanager_url = \"am:9093\"\n"
        ));
        assert!(
            e.starts_with("console.alertmanager_url: `am:9093` must start with http://"),
            "{e}"
        );
        let e = error_of(&format!("{GOOD}\n[console]\nalertmanager = \"x\"\n"));
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn the_console_certificate_goes_only_with_tls_and_the_oidc_sign_in() {
        const OIDC: &str = "[oidc]\nissuer = \"https://sso.test/realms/ops\"\n\
                            audiences = [\"picket\"]\n[oidc.console]\nclient_id = \"c\"\n";
        const CERT: &str =
            "[console]\nclient_cert = \"console.pem\"\nclient_key = \"console.key\"\n";
        let config = Config::parse(&format!("{GOOD}\n{MTLS}{OIDC}{CERT}")).unwrap();
        assert_eq!(
            config.console.client_cert.as_deref(),
            Some(Path::new("console.pem"))
        );
        assert!(!config.console_client_cert_missing());
        let without = Config::parse(&format!("{GOOD}\n{MTLS}{OIDC}")).unwrap();
        assert!(without.console_client_cert_missing());
        let plain_tls = MTLS.replace("require_client_cert = true", "");
        let config = Config::parse(&format!("{GOOD}\n{plain_tls}{OIDC}")).unwrap();
        assert!(
            !config.console_client_cert_missing(),
            "nothing asks for one"
        );
        for (text, rule) in [
            (
                format!("{GOOD}\n{MTLS}{OIDC}[console]\nclient_cert = \"c.pem\"\n"),
                "client_cert and client_key go together",
            ),
            (
                format!("{GOOD}\n{MTLS}{OIDC}[console]\nclient_key = \"c.key\"\n"),
                "client_cert and client_key go together",
            ),
            (format!("{GOOD}\n{OIDC}{CERT}"), "needs [tls]"),
            // Insecure dev auth or no auth: the certificate would be every person's identity.
            (
                format!("insecure_dev_auth = true\n{GOOD}\n{MTLS}{CERT}"),
                "needs [oidc.console]",
            ),
            (format!("{GOOD}\n{MTLS}{CERT}"), "needs [oidc.console]"),
        ] {
            let e = error_of(&text);
            assert!(e.starts_with("console.client_cert: "), "{e}");
            assert!(e.contains(rule), "{e}");
        }
        let mut config = Config::parse(&format!("{GOOD}\n{MTLS}{OIDC}{CERT}")).unwrap();
        config.resolve_paths(Path::new("/etc/picket"));
        assert_eq!(
            config.console.client_key.as_deref(),
            Some(Path::new("/etc/picket/console.key"))
        );
    }

    #[test]
    fn http_addresses_and_the_external_url_default_sensibly() {
        // No HTTP at all: no addresses, no links.
        let config = Config::parse(GOOD).unwrap();
        assert_eq!(config.http_endpoints().len(), 0);
        assert_eq!(config.external_url(), None);
        // http_listen only: every member on the same port at its client host; the links on the
        // first member.
        let config = Config::parse(&format!("http_listen = \"0.0.0.0:7480\"\n{GOOD}")).unwrap();
        assert_eq!(config.http_endpoints()[&3], "http://127.0.0.1:7480");
        assert_eq!(
            config.external_url().as_deref(),
            Some("http://127.0.0.1:7480")
        );
        // An explicit member address wins; an explicit external_url loses its trailing slash.
        let text = format!(
            "external_url = \"https://picket.example.com/\"\nhttp_listen = \"0.0.0.0:7480\"\n{}",
            GOOD.replace(
                "client_address = \"127.0.0.1:7401\"",
                "client_address = \"127.0.0.1:7401\"\nhttp_address = \"10.1.1.1:8080\"",
            )
        );
        let config = Config::parse(&text).unwrap();
        assert_eq!(config.http_endpoints()[&1], "http://10.1.1.1:8080");
        assert_eq!(config.http_endpoints()[&2], "http://127.0.0.1:7480");
        assert_eq!(
            config.external_url().as_deref(),
            Some("https://picket.example.com")
        );
    }

    const MTLS: &str = "[tls]\ncert = \"n.pem\"\nkey = \"n.key\"\nca = \"ca.pem\"\n\
                        require_client_cert = true\n";

    #[test]
    fn certificate_roles_and_principal_sources_are_checked() {
        let config = Config::parse(&format!("{GOOD}\n{MTLS}")).unwrap();
        let certs = config.certificate_auth().unwrap().unwrap();
        assert_eq!(
            certs.principal_from,
            vec![
                crate::auth::PrincipalSource::SanUri,
                crate::auth::PrincipalSource::SanDns,
                crate::auth::PrincipalSource::Cn
            ]
        );
        let anyone = certs.caller_named("svc".into());
        assert!(anyone.lock_roles.allows(Some("orders")) && anyone.roles.is_empty());
        let text = format!(
            "{GOOD}\n{MTLS}client_principal_from = \"cn\"\n[auth]\ncertificate_roles = \
             [\"picket-client:orders\"]\n[auth.certificate_principal_roles]\n\
             alice = [\"picket-operator\"]\n"
        );
        let certs = Config::parse(&text)
            .unwrap()
            .certificate_auth()
            .unwrap()
            .unwrap();
        assert_eq!(certs.principal_from, vec![crate::auth::PrincipalSource::Cn]);
        let alice = certs.caller_named("alice".into());
        assert!(alice.lock_roles.allows(Some("orders")));
        assert!(!alice.lock_roles.allows(Some("billing")));
        assert!(alice
            .require(&[picket_core::locks::Role::OnCall], None)
            .is_ok());
        let bob = certs.caller_named("bob".into());
        assert!(bob
            .require(&[picket_core::locks::Role::OnCall], None)
            .is_err());
        let e = error_of(&format!(
            "{GOOD}\n{MTLS}[auth]\ncertificate_roles = [\"picket-clients\"]\n"
        ));
        assert!(
            e.starts_with("auth.certificate_roles: unknown role `picket-clients`"),
            "{e}"
        );
        let e = error_of(&format!(
            "{GOOD}\n{MTLS}client_principal_from = \"email\"\n"
        ));
        assert!(e.contains("client_principal_from"), "{e}");
        // Without client certificates there is nothing to configure.
        let plain = Config::parse(GOOD).unwrap();
        assert_eq!(plain.certificate_auth(), Ok(None));
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    #[test]
    fn the_shipped_example_is_valid() {
        let config = Config::parse(include_str!("../picket.example.toml")).unwrap();
        assert_eq!(config.members.len(), 3);
        assert_eq!(config.scheme(), "https");
        assert_eq!(config.client_listen, Some("0.0.0.0:7401".parse().unwrap()));
        assert_eq!(
            config.external_url().as_deref(),
            Some("https://picket.internal:7480")
        );
        // `[tls] http = true`: the HTTP port serves HTTPS, so its links and hints say so.
        assert_eq!(
            config.http_endpoints()[&2],
            "https://picket-2.internal:7480"
        );
    }
}
