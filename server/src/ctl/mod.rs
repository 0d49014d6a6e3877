//! `picketctl`: the command line of Picket, for service engineers (sessions, locks around a
//! command) and operators (inspect, holds, watch, classes, force-release, audit).
//!
//! Every command talks to the cluster through `picket_net::client` (leader following, retries,
//! timeouts). Output is for people by default and JSON with `--json` (one object per command;
//! `watch` prints one object per event).

mod commands;
mod confirm;
#[cfg(all(test, not(madsim)))]
mod e2e;
mod render;
mod run;
#[cfg(all(test, not(madsim)))]
mod tests;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use picket_net::client::{Client, ClientConfig, ClientError, Credentials};

/// The client endpoints of `picketd dev`.
pub const DEV_ENDPOINTS: &str = "127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403";

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: the cluster refused or could not be reached.
pub const EXIT_ERROR: u8 = 1;
/// Exit status: picketctl refused (bad arguments, a fenced class not acknowledged).
pub const EXIT_REFUSED: u8 = 2;
/// Exit status: the lock was lost while held (the command, if any, was killed).
pub const EXIT_LOCK_LOST: u8 = 3;
/// Exit status: interrupted (ctrl-c); the lock was released.
pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, Parser)]
#[command(
    name = "picketctl",
    version,
    about = "Take locks and operate a Picket lock cluster",
    long_about = "Take locks and operate a Picket lock cluster.\n\n\
        With no flags picketctl talks to `picketd dev` (127.0.0.1:7401-7403). Any replica will do: \
        picketctl follows the leader.",
    after_help = "Exit status: 0 ok, 1 the cluster refused or was unreachable, 2 refused by picketctl \
        (bad arguments, the class's fenced flag not acknowledged), 3 the lock was lost, 130 interrupted; \
        `lock NS KEY -- CMD` exits with CMD's status.\n\n\
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
    /// Replica client endpoints, comma-separated (host:port or http(s)://host:port).
    #[arg(long, env = "PICKET_ENDPOINTS", value_delimiter = ',', default_value = DEV_ENDPOINTS, global = true)]
    pub endpoints: Vec<String>,
    /// Print JSON (one object per answer) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Dev-mode principal (`picketd --insecure-dev-auth`), sent as x-picket-principal.
    #[arg(long, env = "PICKET_PRINCIPAL", global = true)]
    pub principal: Option<String>,
    /// Dev-mode roles, comma-separated (on-call, incident-commander, class-admin), sent as
    /// x-picket-roles.
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
    ///
    /// CMD gets PICKET_TOKEN, PICKET_NAMESPACE, PICKET_KEY and PICKET_SESSION in its
    /// environment. If the lock is lost, CMD is killed and picketctl exits 3. The lock is
    /// released when CMD exits; picketctl exits with CMD's status.
    Lock {
        namespace: String,
        key: String,
        /// Session TTL in milliseconds (default: the class/cluster default).
        #[arg(long)]
        ttl_ms: Option<u64>,
        /// Fail at once if the key is held instead of waiting.
        #[arg(long)]
        no_wait: bool,
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
    /// Follow the lock log of a namespace (and key prefix) until ctrl-c.
    Watch {
        namespace: String,
        prefix: Option<String>,
        /// First revision to show (0: the oldest retained).
        #[arg(long, default_value_t = 0)]
        from: u64,
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
        /// Why (recorded in the audit trail).
        #[arg(long)]
        reason: String,
        /// Also revoke the holder's session (its client fences itself at its next keepalive).
        #[arg(long)]
        revoke_session: bool,
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
            CtlError::Refused(message) | CtlError::Io(message) => write!(f, "{message}"),
        }
    }
}

impl CtlError {
    fn exit(&self) -> u8 {
        match self {
            CtlError::Client(ClientError::SessionLost { .. }) => EXIT_LOCK_LOST,
            CtlError::Refused(_) => EXIT_REFUSED,
            CtlError::Client(_) | CtlError::Io(_) => EXIT_ERROR,
        }
    }
}

impl Global {
    /// The client configuration these flags describe.
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
pub fn main() -> ExitCode {
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
            }
            ExitCode::from(error.exit())
        }
    }
}

/// Runs one parsed command; answers the exit status.
pub async fn execute(cli: Cli) -> Result<u8, CtlError> {
    let ttl_ms = match &cli.command {
        Command::Session { ttl_ms, .. } | Command::Lock { ttl_ms, .. } => *ttl_ms,
        _ => None,
    };
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
            no_wait,
            command,
            ..
        } => run::lock(&client, &namespace, &key, no_wait, &command, json).await,
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
        other => commands::one_shot(&client, other).await.map(out),
    }
}
