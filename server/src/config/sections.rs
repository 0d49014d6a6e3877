//! The configuration file's sections besides the cluster and its members: `[backup]`,
//! `[console]`, `[auth]`, `[timing]`, `[sessions]`, `[force_releases]`, `[limits]`, `[storage]`,
//! `[tls]`, with their defaults.

use super::*;

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
    /// How the leader confirms a linearizable read (inspection, listing).
    pub read_mode: ReadMode,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            election_timeout_ms_min: 300,
            election_timeout_ms_max: 600,
            heartbeat_ms: 75,
            read_mode: ReadMode::default(),
        }
    }
}

impl Timing {
    /// The replica's `read_lease_ms`: with leases, as long as the shortest election timeout
    /// (a follower waits that long before it campaigns anyway); 0 with read-index.
    pub fn read_lease_ms(&self) -> u64 {
        match self.read_mode {
            ReadMode::ReadIndex => 0,
            ReadMode::Lease => self.election_timeout_ms_min,
        }
    }
}

/// `[timing] read_mode` (docs/protocol.md, "Linearizable reads"; the A/B in
/// docs/PERFORMANCE.md, "Lease reads").
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ReadMode {
    /// Each read waits for a heartbeat round started after it to be acknowledged by a quorum.
    #[default]
    ReadIndex,
    /// A read is confirmed at once while the leader holds a read lease granted by a quorum with
    /// its heartbeats; otherwise as with read-index.
    Lease,
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
    /// How a group commit's one write is made durable: `"fdatasync"` (default: a `pwrite`, then
    /// an `fdatasync`), `"separate"` (the records and the commit record in two writes, as before
    /// issue 39) or `"dsync"` (one `pwritev2` with `RWF_DSYNC`, Linux 4.7+; older kernels
    /// fall back to the former). docs/PERFORMANCE.md has the A/B that chose the default.
    pub write_mode: WriteMode,
}

/// How the log's group commits are made durable (`[storage] write_mode`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WriteMode {
    /// The records and the commit record in two `pwrite`s, then an `fdatasync` (the log's way
    /// before issue 39; kept for the A/B).
    Separate,
    /// A `pwrite` of the records and commit record, then an `fdatasync`.
    #[default]
    Fdatasync,
    /// One `pwritev2(RWF_DSYNC)` of the records and commit record.
    Dsync,
}

impl From<WriteMode> for picket_storage::WriteMode {
    fn from(mode: WriteMode) -> Self {
        match mode {
            WriteMode::Separate => picket_storage::WriteMode::Separate,
            WriteMode::Fdatasync => picket_storage::WriteMode::Fdatasync,
            WriteMode::Dsync => picket_storage::WriteMode::Dsync,
        }
    }
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
            write_mode: WriteMode::Fdatasync,
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
