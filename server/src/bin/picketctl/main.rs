//! `picketctl`: the command line of Picket, for service engineers (sessions, locks around a
//! command) and operators (inspect, holds, watch, classes, force-release, audit).
//!
//! Every command talks to the cluster through `picket_net::client` (leader following, retries,
//! timeouts). Output is for people by default and JSON with `--json` (one object per command;
//! `watch` prints one object per event). See `picketctl --help` and `docs/client.md`.

mod child;
mod cluster;
mod commands;
mod confirm;
#[cfg(all(test, not(madsim)))]
mod e2e;
mod render;
mod run;
mod snapshot;
#[cfg(all(test, not(madsim)))]
mod tests;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use picket_net::client::{Client, ClientConfig, ClientError, Credentials, TlsConfig};

/// The client endpoints of `picketd dev`.
pub const DEV_ENDPOINTS: &str = "127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403";

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: the cluster refused the request.
pub const EXIT_ERROR: u8 = 1;
/// Exit status: picketctl refused (bad arguments, a fenced class not acknowledged).
pub const EXIT_REFUSED: u8 = 2;
/// Exit status: the lock was lost while held (the command, if any, was stopped).
pub const EXIT_LOCK_LOST: u8 = 3;
/// Exit status: `lock --timeout` passed before the grant (the wait left the queue).
pub const EXIT_TIMED_OUT: u8 = 4;
/// Exit status: `lock --no-wait` found the key held.
pub const EXIT_BUSY: u8 = 5;
/// Exit status: no replica answered within the retry budget.
pub const EXIT_UNREACHABLE: u8 = 6;
/// Exit status: SIGHUP; the command was stopped and the lock released.
pub const EXIT_HANGUP: u8 = 129;
/// Exit status: interrupted (SIGINT, ctrl-c); the command was stopped and the lock released.
pub const EXIT_INTERRUPTED: u8 = 130;
/// Exit status: SIGTERM; the command was stopped and the lock released.
pub const EXIT_TERMINATED: u8 = 143;

#[derive(Debug, Parser)]
#[command(
    name = "picketctl",
    version = picket_server::version::short(),
    long_version = picket_server::version::long(),
    about = "Take locks and operate a Picket lock cluster",
    long_about = "Take locks and operate a Picket lock cluster.\n\n\
        With no flags picketctl talks to `picketd dev` (127.0.0.1:7401-7403). Any replica will do: \
        picketctl follows the leader.",
    after_help = "Exit status: 0 ok, 1 the cluster refused, 2 refused by picketctl \
        (bad arguments, the class's fenced flag not acknowledged), 3 the lock was lost, 4 the lock \
        wait timed out (--timeout), 5 the key is held (--no-wait), 6 no replica answered, 129/130/143 \
        SIGHUP/SIGINT/SIGTERM (the command stopped, the lock released); `lock NS KEY -- CMD` \
        otherwise exits with CMD's status.\n\n\
        Examples:\n  picketctl lock orders invoice/42 -- ./settle.sh\n  picketctl inspect orders invoice/42\n  \
        picketctl force-release request orders invoice/42 --token 1234 --reason 'holder hung, INC-7'\n  \
        picketctl force-release approve 9 --ack fenced"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// Replica client endpoints, comma-separated: https://host:port (TLS), http://host:port
    /// (plaintext), or host:port (TLS when --ca, --cert or --key is given, else plaintext).
    #[arg(long, env = "PICKET_ENDPOINTS", value_delimiter = ',', default_value = DEV_ENDPOINTS, global = true)]
    pub endpoints: Vec<String>,
    /// PEM CA bundle that signed the replicas' certificates (TLS; without it https://
    /// endpoints are checked against the public web roots). Before the command.
    #[arg(long, env = "PICKET_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// PEM client certificate, for clusters that require one (mutual TLS; with --key). Before
    /// the command.
    #[arg(long, env = "PICKET_CERT", value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// PEM private key of --cert. Before the command (`audit --key` is the audit's key filter).
    // `id`: the subcommands' `KEY` argument has the id `key`.
    #[arg(long = "key", id = "tls_key", env = "PICKET_KEY", value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Print JSON (one object per answer) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Dev-mode principal (`picketd --insecure-dev-auth`), sent as x-picket-principal.
    #[arg(long, env = "PICKET_PRINCIPAL", global = true)]
    pub principal: Option<String>,
    /// Dev-mode roles, comma-separated (picket-operator, picket-incident-commander,
    /// picket-admin; `:namespace` to scope one), sent as x-picket-roles.
    #[arg(long, env = "PICKET_ROLES", global = true)]
    pub roles: Option<String>,
    /// OIDC access token, sent as `authorization: Bearer ...` (the lock token of `unlock` and
    /// `force-release request` is `--token`).
    #[arg(long, env = "PICKET_AUTH_TOKEN", global = true, hide_env_values = true)]
    pub auth_token: Option<String>,
    /// Timeout of one RPC attempt, in milliseconds.
    #[arg(long, default_value_t = 5_000, global = true)]
    pub timeout_ms: u64,
    /// How long to keep retrying across replicas, in milliseconds.
    #[arg(long, default_value_t = 15_000, global = true)]
    pub retry_ms: u64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a session and print it, with its secret (shown once: whoever has it can act on
    /// the session, e.g. `unlock` its holds); with --keep, keep it alive until ctrl-c.
    Session {
        /// Session TTL in milliseconds (default: the class/cluster default).
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// Keep the session alive until ctrl-c, then close it.
        #[arg(long)]
        keep: bool,
    },
    /// Take a lock (waiting in the queue) and run CMD while holding it, or hold until ctrl-c.
    /// With --permit: a permit of a semaphore key, the same way.
    ///
    /// CMD runs in its own process group, started only once the lock is held, with
    /// PICKET_TOKEN, PICKET_NAMESPACE, PICKET_KEY and PICKET_SESSION in its environment; the
    /// session's identity records --name and CMD's pid (what `inspect` shows). If the lock is
    /// lost (session gone, or force-released), or picketctl gets SIGINT/SIGTERM/SIGHUP, the
    /// group gets SIGTERM, --kill-grace later SIGKILL; then the lock is released (or the session
    /// closed) and picketctl exits 3 (lost) or 128+signal. When CMD exits by itself, what it left
    /// in its group is stopped the same way, the lock released, and CMD's status passed on.
    /// A wait that ends for any reason (--timeout: exit 4, a signal) leaves the queue. The
    /// session's jeopardy (no keepalive acknowledged for half the TTL) and its recovery are
    /// logged to stderr, one line each; CMD keeps running through a jeopardy.
    ///
    /// Exit status: CMD's, or 2 bad arguments, 3 lock lost, 4 wait timed out, 5 busy
    /// (--no-wait), 6 unreachable, 129/130/143 signalled.
    Lock {
        namespace: String,
        key: String,
        /// Session TTL in milliseconds (default: the key's class default, else the cluster's).
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// Fail at once (exit 5) if the key is held instead of waiting.
        #[arg(long)]
        no_wait: bool,
        /// Take the key in shared mode, together with other shared holders (waits behind an
        /// exclusive request queued before it).
        #[arg(long, conflicts_with = "permit")]
        shared: bool,
        /// Take a permit of a semaphore key (declared with `semaphore set`): up to N holders
        /// together, each in its own slot; CMD also gets PICKET_SLOT. Refused on a lock
        /// (`not_a_semaphore`), as exclusive or shared on a semaphore (`key_is_semaphore`).
        #[arg(long)]
        permit: bool,
        /// Give up waiting after this long (e.g. 30s, 500ms, 2m; 1ms to one day; exit 4): the
        /// wait's server-side deadline, so the cluster itself removes the wait.
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// Between SIGTERM and SIGKILL of CMD's process group (default: 3s, or a third of the
        /// session TTL if that is shorter; must be below the TTL).
        #[arg(long, value_parser = parse_duration)]
        kill_grace: Option<Duration>,
        /// The name the session's identity records (default: CMD's program name).
        #[arg(long)]
        name: Option<String>,
        /// The command to run under the lock (after `--`).
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Release a hold of your own session (needs its id, its secret and the hold's token).
    ///
    /// Only the session's owner can: the server refuses a wrong or missing secret
    /// (`session_not_yours`), and, for a session opened with an OIDC token, any other principal.
    /// Releasing somebody else's lock goes only through the two-person `force-release`
    /// (request, then a second person approves).
    Unlock {
        namespace: String,
        key: String,
        #[arg(long)]
        session: u64,
        /// The token of the hold.
        #[arg(long)]
        token: u64,
        /// The session's secret, in hex, as `picketctl session` printed it (or
        /// `Session::secret()` of the client library gives it).
        #[arg(long, env = "PICKET_SESSION_SECRET", hide_env_values = true)]
        secret: String,
    },
    /// Everything about one key: holder, token, age, TTL, queue, class (fenced?), floor.
    Inspect {
        namespace: String,
        key: String,
        /// Answer from any replica's state, possibly stale.
        #[arg(long)]
        stale: bool,
    },
    /// The holds of a namespace, oldest first.
    Holds {
        namespace: String,
        /// At most this many (0: the server's default page).
        #[arg(long, default_value_t = 0)]
        limit: u32,
        #[arg(long)]
        stale: bool,
    },
    /// Follow the lock log of a namespace (and key prefix) until ctrl-c: from now on, or from
    /// --from. Text lines show the revision, log time (UTC), key, event and who the session is;
    /// through an outage it keeps reconnecting (with backoff) and resumes where it broke.
    Watch {
        namespace: String,
        prefix: Option<String>,
        /// First revision to show (0: the oldest retained). Absent: from the current revision.
        #[arg(long)]
        from: Option<u64>,
    },
    /// List the classes of a namespace (or of every namespace holding locks), or change them.
    #[command(args_conflicts_with_subcommands = true)]
    Classes {
        namespace: Option<String>,
        #[command(subcommand)]
        action: Option<ClassesAction>,
    },
    /// Query the audit trail (force-releases, revocations, class changes).
    Audit {
        #[arg(long)]
        namespace: Option<String>,
        #[arg(long)]
        key: Option<String>,
        /// Lowest revision (inclusive).
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Highest revision (inclusive).
        #[arg(long)]
        to: Option<u64>,
        #[arg(long, default_value_t = 0)]
        limit: u32,
    },
    /// Two-person force-release of a stuck lock.
    #[command(subcommand)]
    ForceRelease(ForceRelease),
    /// Counting semaphores: declare a key with N permits, change N, or remove it (role
    /// class-admin). Take a permit with `picketctl lock --permit NS KEY -- CMD`.
    #[command(subcommand)]
    Semaphore(SemaphoreAction),
    /// The cluster's members, each replica's own status, and membership changes through the
    /// log (add a learner, promote it, remove a member; role picket-admin, audited):
    /// docs/runbooks/replace-machine.md.
    #[command(subcommand)]
    Cluster(ClusterAction),
    /// Backups: save the whole replicated state at one revision to a file (role picket-admin,
    /// logged by the leader), or verify a file offline (docs/runbooks/restore-from-backup.md).
    #[command(subcommand)]
    Snapshot(SnapshotAction),
}

#[derive(Debug, Subcommand)]
pub enum SnapshotAction {
    /// Stream a consistent snapshot from the leader and write it to FILE: checked whole, then
    /// written atomically (a temp file beside FILE, fsync, rename; mode 0600: it holds
    /// session-secret hashes and the audit trail). An existing FILE is replaced only by a
    /// complete backup.
    ///
    /// Exit status: 0 saved, 1 refused (the rule is printed: missing_role, not_leader...) or
    /// the file could not be written, 6 unreachable.
    Save { file: PathBuf },
    /// Verify FILE offline (format version, length, SHA-256, decoding) and print its header:
    /// cluster id, revision, time, members, format version. Needs no cluster.
    ///
    /// Exit status: 0 the file is a good backup, 2 it is not (the rule is printed:
    /// backup_empty, backup_truncated, backup_checksum, backup_format_version, ...).
    Status { file: PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum ClusterAction {
    /// The members (node id, client endpoint, voter or learner) of the newest membership the
    /// first replica that answers knows, and the leader it follows.
    Members,
    /// Asks every member, at the client endpoint the cluster lists for it, for its own status:
    /// role, the leader it follows, applied slot and how far it is behind the most advanced
    /// member, whether it serves, and its storage condition (clean, torn_tail_cut,
    /// durable_state_lost; a damaged directory left behind). Like `etcdctl endpoint status
    /// --cluster`. A member that does not answer within --timeout-ms is listed with the error.
    ///
    /// Exit status: 0 every member answered and serves, 1 some member did not answer or does
    /// not serve (the table says which and why), 6 no replica answered.
    Status,
    /// Add NODE_ID as a learner: it receives the log and votes on nothing until promoted.
    /// Start its picketd with `join = true` (docs/runbooks/replace-machine.md). Answered once
    /// the log chose the change.
    ///
    /// Exit status: 0 done, 1 refused (the rule is printed: already_member,
    /// membership_change_in_progress, missing_role, not_leader...), 2 bad arguments,
    /// 6 unreachable.
    Add {
        node_id: u64,
        /// Its replica-to-replica host:port.
        #[arg(long)]
        peer_address: String,
        /// Its gRPC host:port for clients.
        #[arg(long)]
        client_address: String,
        /// Its HTTP host:port (metrics, health, console), if it has one.
        #[arg(long, default_value = "")]
        http_address: String,
        /// Why (required; goes to the audit log).
        #[arg(long)]
        reason: String,
    },
    /// Promote learner NODE_ID to voter. Refused while it is more than 64 slots behind the
    /// leader or has not answered it (rule learner_not_caught_up) unless --force.
    ///
    /// Exit status as `add`.
    Promote {
        node_id: u64,
        #[arg(long)]
        reason: String,
        /// Promote even a learner that is behind or silent (a voter that cannot vote weakens
        /// the quorum).
        #[arg(long)]
        force: bool,
    },
    /// Remove member NODE_ID (voter or learner, the leader included: it steps down once the
    /// change is in effect). Refused when fewer of the remaining voters than their quorum
    /// answered the leader lately (rule quorum_unreachable) unless --force. Stop the removed
    /// replica's picketd afterwards.
    ///
    /// Exit status as `add`.
    Remove {
        node_id: u64,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum SemaphoreAction {
    /// Declare NS/KEY a semaphore with --permits N (1..=1024), change its N, or remove the
    /// declaration with --permits 0 (only when nobody holds or waits). Lowering N takes no
    /// permit away: no permit is granted until fewer than N hold. Audited with --reason.
    ///
    /// Exit status: 0 done, 1 refused by the cluster (the rule is printed, e.g.
    /// key_held_as_lock, semaphore_in_use, missing_role), 2 bad arguments, 6 unreachable.
    Set {
        namespace: String,
        key: String,
        /// N: 1..=1024, or 0 to remove the declaration.
        #[arg(long)]
        permits: u32,
        /// Why (required; recorded in the audit trail).
        #[arg(long)]
        reason: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClassesAction {
    /// Create or replace the class of a key prefix ("" is the namespace default).
    Put {
        namespace: String,
        /// Class name, [a-z0-9][a-z0-9-]{0,62}.
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "")]
        prefix: String,
        /// A correctness lock: the resource checks tokens.
        #[arg(long)]
        fenced: bool,
        #[arg(long, default_value_t = 10_000)]
        ttl_ms_default: u64,
        #[arg(long, default_value_t = 60_000)]
        ttl_ms_max: u64,
        /// Alert when a hold lasts longer (0: never).
        #[arg(long, default_value_t = 0)]
        hold_ms_max_expected: u64,
        #[arg(long, default_value = "")]
        owner: String,
        #[arg(long, default_value = "")]
        runbook_url: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Remove the class of a key prefix.
    Remove {
        namespace: String,
        #[arg(long, default_value = "")]
        prefix: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ForceRelease {
    /// Step one: ask for a force-release. Shows the holder, token, age, queue and whether the
    /// class is fenced.
    Request {
        namespace: String,
        key: String,
        /// The token you saw in `inspect` (the release fails if the key changed hands).
        #[arg(long)]
        token: u64,
        /// The holder's session id, as `inspect` showed it: required for a shared key whose
        /// holders share the token (granted together); optional otherwise (checked if given).
        #[arg(long)]
        session: Option<u64>,
        /// Why (recorded in the audit trail).
        #[arg(long)]
        reason: String,
        /// Also revoke the holder's session (its client fences itself when it learns it: pushed on its session stream, else at its next keepalive).
        #[arg(long)]
        revoke_session: bool,
        /// Checklist: has the holder's process stopped? Required for an advisory class
        /// (nothing refuses its old holder); recorded for a fenced one.
        #[arg(long, value_enum, value_name = "yes|no|unknown")]
        holder_stopped: Option<Answer>,
        /// Checklist: would it be acceptable if the old holder and the next one both ran?
        /// Required for an advisory class. With anything but `yes` while the holder is not
        /// known to have stopped, the request needs --statement, and only an incident commander
        /// may approve it (docs/locks.md, "The advisory rule").
        #[arg(long, value_enum, value_name = "yes|no|unknown")]
        double_run_acceptable: Option<Answer>,
        /// Why the release is still right although a double run is unsafe (recorded in the
        /// audit trail and shown to the approver first).
        #[arg(long, default_value = "")]
        statement: String,
    },
    /// Step two, by a different person: approve a pending request. Shows the class's fenced
    /// flag and safety statement and requires acknowledging the class kind: `--ack fenced` or
    /// `--ack advisory`, matching it, or (without `--ack`, at a terminal) typing the kind when
    /// asked. Without `--ack` and without a terminal it refuses.
    Approve {
        id: u64,
        /// What you acknowledge the class to be: `fenced` (the resource refuses the old
        /// holder's tokens) or `advisory` (releasing may let two writers in). Must match the
        /// request; nothing is sent otherwise. Absent: asked interactively when stdin is a
        /// terminal, refused otherwise.
        #[arg(long, value_enum)]
        ack: Option<Ack>,
    },
    /// Deny (withdraw) a pending request.
    Deny {
        id: u64,
        #[arg(long)]
        reason: String,
    },
    /// List pending requests.
    List,
}

/// A checklist answer (`--holder-stopped`, `--double-run-acceptable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Answer {
    Yes,
    No,
    Unknown,
}

impl Answer {
    pub fn to_wire(self) -> i32 {
        (match self {
            Answer::Yes => picket_net::proto::ChecklistAnswer::Yes,
            Answer::No => picket_net::proto::ChecklistAnswer::No,
            Answer::Unknown => picket_net::proto::ChecklistAnswer::Unknown,
        }) as i32
    }
}

/// The fenced flag an approver acknowledges having seen (`--ack fenced|advisory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Ack {
    Fenced,
    Advisory,
}

impl Ack {
    pub fn from_fenced(fenced: bool) -> Ack {
        if fenced {
            Ack::Fenced
        } else {
            Ack::Advisory
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Ack::Fenced => "fenced",
            Ack::Advisory => "advisory",
        }
    }
}

/// A failure of one picketctl command, with the exit status it maps to.
#[derive(Debug)]
pub enum CtlError {
    Client(ClientError),
    /// picketctl refused on its own (the message says why and what to do).
    Refused(String),
    Io(String),
    /// `lock --timeout` passed before the grant.
    TimedOut(String),
    /// Stopped by a signal: the exit status to answer (not an error to print).
    Signalled(u8),
}

impl From<ClientError> for CtlError {
    fn from(error: ClientError) -> CtlError {
        CtlError::Client(error)
    }
}

impl std::fmt::Display for CtlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CtlError::Client(error) => write!(f, "{error}"),
            CtlError::Refused(message) | CtlError::Io(message) | CtlError::TimedOut(message) => {
                write!(f, "{message}")
            }
            CtlError::Signalled(code) => write!(f, "stopped by a signal (exit {code})"),
        }
    }
}

impl CtlError {
    /// What to do about the error, when picketctl can tell: a TLS mismatch names the flag.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            CtlError::Client(error) => error.tls_mismatch().map(|m| m.hint()),
            _ => None,
        }
    }

    pub fn exit(&self) -> u8 {
        match self {
            CtlError::Client(ClientError::SessionLost { .. } | ClientError::LockLost { .. }) => {
                EXIT_LOCK_LOST
            }
            CtlError::Client(ClientError::Held { .. }) => EXIT_BUSY,
            CtlError::Client(ClientError::Unavailable { .. }) => EXIT_UNREACHABLE,
            CtlError::TimedOut(_) => EXIT_TIMED_OUT,
            CtlError::Signalled(code) => *code,
            CtlError::Refused(_) => EXIT_REFUSED,
            CtlError::Client(_) | CtlError::Io(_) => EXIT_ERROR,
        }
    }
}

impl Global {
    /// The TLS settings of `--ca`, `--cert` and `--key` (`None` when none is given).
    pub fn tls(&self) -> Result<Option<TlsConfig>, ClientError> {
        if self.ca.is_none() && self.cert.is_none() && self.key.is_none() {
            return Ok(None);
        }
        TlsConfig::from_files(
            self.ca.as_deref(),
            self.cert.as_deref(),
            self.key.as_deref(),
        )
        .map(Some)
    }

    /// The client configuration these flags describe (without TLS: [`Global::tls`]).
    pub fn client_config(&self, ttl_ms: Option<u64>) -> ClientConfig {
        let mut config = ClientConfig::new(self.endpoints.iter().cloned(), "picketctl");
        config.identity_host = hostname();
        config.rpc_timeout = Duration::from_millis(self.timeout_ms.max(1));
        config.retry_budget = Duration::from_millis(self.retry_ms);
        config.session_ttl = ttl_ms.map(Duration::from_millis);
        config.credentials = Credentials {
            principal: self.principal.clone(),
            roles: self.roles.clone(),
            bearer: self.auth_token.clone(),
        };
        // Bad TLS flags are refused once, by `execute`, before any client is built.
        config.tls = self.tls().unwrap_or(None);
        config
    }
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// Parses the arguments, runs the command, and answers the exit status.
fn main() -> ExitCode {
    // `picketctl generate-docs --out-dir DIR`: the Debian package's man pages and completions
    // (not a command of `Cli`, so absent from its help, pages and completions).
    if let Some(status) = picket_server::package_docs::run_if_asked(Cli::command) {
        return status;
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("picketctl: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let json = cli.global.json;
    match runtime.block_on(execute(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            if json {
                println!("{}", render::error_json(&error));
            } else {
                eprintln!("picketctl: {error}");
                if let Some(hint) = error.hint() {
                    eprintln!("picketctl: hint: {hint}");
                }
            }
            ExitCode::from(error.exit())
        }
    }
}

/// `500ms`, `30s`, `2m` or a bare number of milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (digits, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1_000)
    } else if let Some(m) = text.strip_suffix('m') {
        (m, 60_000)
    } else {
        (text, 1)
    };
    let value: u64 = digits.trim().parse().map_err(|_| {
        format!("`{text}` is not a duration: give a whole number with ms, s or m (e.g. 30s)")
    })?;
    value
        .checked_mul(scale)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too long a duration"))
}

/// Runs one parsed command; answers the exit status.
pub async fn execute(cli: Cli) -> Result<u8, CtlError> {
    let ttl_ms = match &cli.command {
        Command::Session { ttl_ms, .. } => *ttl_ms,
        _ => None,
    };
    cli.global.tls()?;
    let client = Client::new(cli.global.client_config(ttl_ms))?;
    let json = cli.global.json;
    let out = |report: render::Report| {
        report.print(json);
        EXIT_OK
    };
    match cli.command {
        Command::Session { keep, .. } => run::session(&client, keep, json).await,
        Command::Lock {
            namespace,
            key,
            ttl_ms,
            no_wait,
            shared,
            permit,
            timeout,
            kill_grace,
            name,
            command,
        } => {
            let args = run::LockArgs {
                namespace,
                key,
                ttl_ms,
                no_wait,
                shared,
                permit,
                timeout,
                kill_grace,
                name,
                command,
            };
            run::lock(&cli.global, args, json).await
        }
        Command::Watch {
            namespace,
            prefix,
            from,
        } => {
            run::watch(
                &client,
                &namespace,
                prefix.as_deref().unwrap_or(""),
                from,
                json,
            )
            .await
        }
        Command::Cluster(ClusterAction::Members) => {
            cluster::members(&cli.global, &client).await.map(out)
        }
        Command::Cluster(
            change @ (ClusterAction::Add { .. }
            | ClusterAction::Promote { .. }
            | ClusterAction::Remove { .. }),
        ) => cluster::change(&client, change).await.map(out),
        Command::Snapshot(SnapshotAction::Save { file }) => {
            snapshot::save(&client, &file).await.map(out)
        }
        Command::Snapshot(SnapshotAction::Status { file }) => snapshot::status(&file).map(out),
        Command::Cluster(ClusterAction::Status) => {
            let (report, all_serving) = cluster::status(&cli.global, &client).await?;
            report.print(json);
            Ok(if all_serving { EXIT_OK } else { EXIT_ERROR })
        }
        other => commands::one_shot(&client, other).await.map(out),
    }
}
