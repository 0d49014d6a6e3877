//! `picketctl`: the command line of Picket, for service engineers (sessions, locks around a
//! command) and operators (inspect, holds, watch, classes, force-release, audit).
//!
//! Every command talks to the cluster through `picket_client` (leader following, retries,
//! timeouts). Output is for people by default and JSON with `--json` (one object per command;
//! `watch` prints one object per event). See `picketctl --help` and `docs/client.md`.
//!
//! A crate of its own, so the CLI takes none of picketd's HTTP server, templates or allocator;
//! what both binaries say (`--version`, the audit trail in words, UTC time, man pages) comes from
//! picket-common. This library is the binary's (`src/main.rs` calls [`main`]) and the server's
//! in-process end-to-end tests' (`server/tests/ctl_in_process.rs`); it is not an API.

mod actions;
#[cfg(all(test, not(madsim)))]
mod approve_tests;
mod child;
pub mod cluster;
pub mod commands;
mod confirm;
mod render;
mod run;
mod snapshot;
#[cfg(all(test, not(madsim)))]
mod tests;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use picket_client::{Client, ClientConfig, ClientError, Credentials, TlsConfig};

pub use actions::{
    Ack, Answer, ClassesAction, ClusterAction, ForceRelease, SemaphoreAction, SnapshotAction,
    WaitInEffect,
};

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
    version = picket_common::version::short(),
    long_version = picket_common::version::long(),
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

#[derive(Clone, Debug, Args)]
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
    Lock(LockArgs),
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

/// What `picketctl lock` was asked to do.
#[derive(Debug, Args)]
pub struct LockArgs {
    pub namespace: String,
    pub key: String,
    /// Session TTL in milliseconds (default: the key's class default, else the cluster's).
    #[arg(long)]
    pub ttl_ms: Option<u64>,
    /// Fail at once (exit 5) if the key is held instead of waiting.
    #[arg(long)]
    pub no_wait: bool,
    /// Take the key in shared mode, together with other shared holders (waits behind an
    /// exclusive request queued before it).
    #[arg(long, conflicts_with = "permit")]
    pub shared: bool,
    /// Take a permit of a semaphore key (declared with `semaphore set`): up to N holders
    /// together, each in its own slot; CMD also gets PICKET_SLOT. Refused on a lock
    /// (`not_a_semaphore`), as exclusive or shared on a semaphore (`key_is_semaphore`).
    #[arg(long)]
    pub permit: bool,
    /// Give up waiting after this long (e.g. 30s, 500ms, 2m; 1ms to one day; exit 4): the
    /// wait's server-side deadline, so the cluster itself removes the wait.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL of CMD's process group (default: 3s, or a third of the
    /// session TTL if that is shorter; must be below the TTL).
    #[arg(long, value_parser = parse_duration)]
    pub kill_grace: Option<Duration>,
    /// The name the session's identity records (default: CMD's program name).
    #[arg(long)]
    pub name: Option<String>,
    /// The command to run under the lock (after `--`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
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

/// Parses the arguments, runs the command, and answers the exit status (the binary's `main`).
pub fn main() -> ExitCode {
    // `picketctl generate-docs --out-dir DIR`: the Debian package's man pages and completions
    // (not a command of `Cli`, so absent from its help, pages and completions).
    if let Some(status) = picket_common::package_docs::run_if_asked(Cli::command) {
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
        Command::Lock(args) => run::lock(&cli.global, args, json).await,
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
        ) => cluster::change(&cli.global, &client, change).await.map(out),
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
