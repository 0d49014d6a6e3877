//! `picketd`: the Picket replica daemon.

/// See server/Cargo.toml: threads that free what the driver allocated must not stall it.
#[cfg(not(madsim))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(not(madsim))]
mod real {
    use std::path::PathBuf;
    use std::time::Duration;

    use clap::{CommandFactory, Parser, Subcommand};
    use picket_server::auth::dev::DevIssuer;
    use picket_server::auth::OidcSection;
    use picket_server::config::Config;
    use picket_server::dev::{joiner_config, DevCluster, DevOptions, DevPorts};
    use picket_server::exit_status::ExitStatus;
    use picket_server::node::clock::SystemClock;
    use picket_server::node::durable::EmptyDataDir;
    use picket_storage::RealDisk;

    /// Picket: a distributed lock service with fencing tokens (one replica per process).
    ///
    /// Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=picket_server=debug) to change the level.
    #[derive(Parser, Debug)]
    #[command(
        name = "picketd",
        version = picket_server::version::short(),
        long_version = picket_server::version::long(),
        about,
        long_about,
        after_help = "Exit status: 0 stopped on request (or check-config: valid), 1 a failure a \
            restart may cure (IO error, port in use, identity provider unreachable), 2 bad \
            arguments, 65 the data directory needs the operator (empty without --init or \
            --rejoin, or a damaged boot record), 70 a broken invariant, 78 an invalid \
            configuration (docs/operations.md, \"Exit status\")."
    )]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Subcommand, Debug)]
    enum Command {
        /// Run one replica of a cluster from a configuration file (see docs/operations.md).
        ///
        /// The replica recovers from its data directory, joins the other members listed in the
        /// file, and serves the Lock and Admin gRPC services on its client address and the Peer
        /// service on its peer address. SIGTERM or ctrl-c stops it gracefully; everything it
        /// acknowledged is already on disk.
        ///
        /// A data directory without any state is refused unless --init (first start of a replica
        /// of a new cluster) or --rejoin (a replica that ran before and lost its disk) says
        /// which it is.
        Run {
            /// The TOML configuration file (node_id, data_dir, members, timing, tls, ...).
            #[arg(long, short)]
            config: PathBuf,
            /// Believe the x-picket-principal / x-picket-roles request metadata as the caller's
            /// identity and roles. DEVELOPMENT ONLY: anyone can claim any role.
            #[arg(long)]
            insecure_dev_auth: bool,
            /// First start of a replica of a NEW cluster: an empty data directory starts with
            /// empty state. Ignored once the directory holds state. Never use it for a replica
            /// that ran before: with its promises forgotten it could help choose a second
            /// value for a slot.
            #[arg(long, conflicts_with = "rejoin")]
            init: bool,
            /// This replica ran before and lost its disk (replaced or wiped): an empty data
            /// directory starts in "durable state lost" mode, re-learning its state from the
            /// other replicas (all of them must be up) before it votes or accepts. Ignored once
            /// the directory holds state.
            #[arg(long)]
            rejoin: bool,
        },
        /// Start a local 3-replica cluster in this process, for a first try.
        ///
        /// Clients: 127.0.0.1:7401, 7402, 7403; peers: 127.0.0.1:7411, 7412, 7413. Data is kept in
        /// --data-dir (restarting `picketd dev` recovers it; --fresh wipes it first). Dev auth is
        /// on: admin calls take their principal and roles from request metadata, unless --oidc.
        /// HTTP (/metrics, /v1/namespaces/NS/locks/KEY, /healthz): 127.0.0.1:7481, 7482, 7483.
        Dev {
            /// Where the three replicas keep their data.
            #[arg(long, default_value = "./picket-dev-data")]
            data_dir: PathBuf,
            /// Delete the data directory first.
            #[arg(long)]
            fresh: bool,
            /// Start the cluster from a backup file (`picketctl snapshot save`): a NEW cluster
            /// (cluster id picket-dev-r<REVISION>) whose tokens are above every token of the
            /// cluster the backup came from, as `picketd restore` makes it. Needs a data
            /// directory without member data (add --fresh to wipe it first).
            #[arg(long, value_name = "FILE")]
            restore: Option<PathBuf>,
            /// Verify admin calls' OIDC bearer tokens instead of believing metadata: a dev
            /// issuer's signing key and JWKS are kept in DATA_DIR/dev-oidc, and
            /// `picketd dev-token` mints tokens with them.
            #[arg(long)]
            oidc: bool,
            /// The Alertmanager the console reads Picket's firing alerts from (its overview
            /// and verify pages), e.g. http://127.0.0.1:9093 (`[console] alertmanager_url` of a
            /// real cluster). Without it those panels say the alert state is unknown here.
            #[arg(long, value_name = "URL")]
            alertmanager_url: Option<String>,
        },
        /// Start one more local replica that joins a running `picketd dev` cluster, to try
        /// membership changes (add it, promote it, remove it; docs/operations.md).
        ///
        /// Member ID (4..=9) listens on client 127.0.0.1:(7400 + ID), peer 7410 + ID and HTTP
        /// 7480 + ID, keeps its data in DATA_DIR/node-ID and reaches the cluster through members
        /// 1..=3 of `picketd dev`. It is nobody's member until `picketctl cluster add` adds it;
        /// it prints the commands. Ctrl-c stops it (remove it first, or the cluster counts a
        /// voter that is down).
        DevJoin {
            /// Its node id: 4..=9.
            #[arg(long)]
            id: u64,
            /// The data directory of `picketd dev` (its data goes in DATA_DIR/node-ID).
            /// Default: the running dev cluster's, as member 1's /healthz names it, so the new
            /// replica's data lands beside the cluster's wherever this is run from.
            #[arg(long)]
            data_dir: Option<PathBuf>,
            /// As `picketd dev --oidc`: verify admin calls' tokens from the dev issuer.
            #[arg(long)]
            oidc: bool,
        },
        /// Mint a bearer token for a `picketd dev --oidc` cluster (its dev issuer's key).
        DevToken {
            /// The data directory of `picketd dev --oidc`.
            #[arg(long, default_value = "./picket-dev-data")]
            data_dir: PathBuf,
            #[arg(long)]
            principal: String,
            /// Comma-separated realm roles: picket-operator, picket-incident-commander,
            /// picket-admin (`:namespace` to scope one, e.g. picket-operator:orders).
            #[arg(long, default_value = "picket-operator")]
            roles: String,
            /// Lifetime of the token in seconds.
            #[arg(long, default_value_t = 3600)]
            ttl_s: u64,
        },
        /// Make this replica's data directory the first state of a NEW cluster, restored from a
        /// backup file (docs/runbooks/restore-from-backup.md). Run it once on every replica of
        /// the new cluster with the same FILE, --bump-revision and --floor-from (each prints
        /// the restored revision and state digest: they must agree), then start them with
        /// `picketd run --config CONFIG`.
        ///
        /// The configuration must name a cluster_id other than the backup's (the old and new
        /// replicas refuse each other) and an empty or missing data_dir. The new cluster
        /// starts at revision R + N, R the highest revision of the backup, of every --floor-from
        /// backup and of every --floor-from old data directory, N --bump-revision: every token
        /// it grants is above every token the old cluster granted (docs/storage.md, "Restoring
        /// a backup"). Sessions, holds and waiters do not survive; classes, semaphores and the
        /// audit trail do; pending force-releases are dropped (audited).
        Restore {
            /// The backup file (`picketctl snapshot save`).
            #[arg(long, value_name = "FILE")]
            from: PathBuf,
            /// This replica's configuration file in the NEW cluster.
            #[arg(long, short)]
            config: PathBuf,
            /// Revisions added above the highest revision the old cluster is known to have
            /// reached (default 2^40: docs/storage.md says why).
            #[arg(long, value_name = "N", default_value_t = picket_server::backup::BUMP_REVISION_DEFAULT)]
            bump_revision: u64,
            /// A newer backup file, or an old replica's data directory that survived (read
            /// only): the restored revision is raised above what it reached. Repeatable.
            #[arg(long, value_name = "FILE_OR_DIR")]
            floor_from: Vec<PathBuf>,
        },
        /// Check a configuration file and exit (0 if it is valid, 78 if not).
        CheckConfig {
            #[arg(long, short)]
            config: PathBuf,
        },
    }

    /// Why a command failed: the line printed on stderr and the exit status.
    struct Failure {
        status: ExitStatus,
        message: String,
    }

    impl Failure {
        fn new(status: ExitStatus, message: impl ToString) -> Failure {
            Failure {
                status,
                message: message.to_string(),
            }
        }
    }

    /// The development commands' errors: a failure a retry may cure.
    impl From<String> for Failure {
        fn from(message: String) -> Failure {
            Failure::new(ExitStatus::Failure, message)
        }
    }

    pub fn main() -> std::process::ExitCode {
        // `picketd generate-docs --out-dir DIR`: the Debian package's man pages and completions
        // (not a command of `Cli`, so absent from its help, pages and completions).
        if let Some(status) = picket_server::package_docs::run_if_asked(Cli::command) {
            return status;
        }
        let cli = Cli::parse();
        init_logging();
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("picketd: cannot start the async runtime: {error}");
                return ExitStatus::Failure.into();
            }
        };
        let result = runtime.block_on(async move {
            match cli.command {
                Command::Run {
                    config,
                    insecure_dev_auth,
                    init,
                    rejoin,
                } => {
                    let empty = match (init, rejoin) {
                        (true, _) => EmptyDataDir::Init,
                        (_, true) => EmptyDataDir::Rejoin,
                        _ => EmptyDataDir::Refuse,
                    };
                    run(config, insecure_dev_auth, empty).await
                }
                Command::Dev {
                    data_dir,
                    fresh,
                    restore,
                    oidc,
                    alertmanager_url,
                } => dev(data_dir, fresh, restore, oidc, alertmanager_url)
                    .await
                    .map_err(Failure::from),
                Command::Restore {
                    from,
                    config,
                    bump_revision,
                    floor_from,
                } => restore(&from, &config, bump_revision, &floor_from).map_err(Failure::from),
                Command::DevJoin { id, data_dir, oidc } => {
                    let data_dir = match data_dir {
                        Some(dir) => dir,
                        None => running_dev_data_dir().await.map_err(Failure::from)?,
                    };
                    dev_join(data_dir, id, oidc).await.map_err(Failure::from)
                }
                Command::DevToken {
                    data_dir,
                    principal,
                    roles,
                    ttl_s,
                } => dev_token(&data_dir, &principal, &roles, ttl_s).map_err(Failure::from),
                Command::CheckConfig { config } => Config::load(&config)
                    .map(|c| {
                        println!(
                            "{}: valid (node {}; {})",
                            config.display(),
                            c.node_id,
                            c.members_meaning()
                        )
                    })
                    .map_err(|e| Failure::new(ExitStatus::of_config(&e), e)),
            }
        });
        match result {
            Ok(()) => ExitStatus::Stopped.into(),
            Err(failure) => {
                eprintln!("picketd: {}", failure.message);
                failure.status.into()
            }
        }
    }

    fn init_logging() {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }

    async fn run(
        path: PathBuf,
        insecure_dev_auth: bool,
        empty: EmptyDataDir,
    ) -> Result<(), Failure> {
        let mut config =
            Config::load(&path).map_err(|e| Failure::new(ExitStatus::of_config(&e), e))?;
        picket_server::backup::check_cluster_id(&config).map_err(Failure::from)?;
        config.insecure_dev_auth |= insecure_dev_auth;
        if config.insecure_dev_auth {
            tracing::warn!("insecure dev auth: callers' x-picket-principal / x-picket-roles metadata is believed");
        }
        let node = picket_server::server::start(&config, RealDisk, SystemClock::new(), empty)
            .await
            .map_err(|e| Failure::new(ExitStatus::of_start(&e), e))?;
        let reason = wait_for_stop(|| node.driver_finished()).await;
        tracing::info!(reason, "stopping");
        node.shutdown()
            .await
            .map_err(|e| Failure::new(ExitStatus::of_driver(&e), e))?;
        tracing::info!("stopped");
        Ok(())
    }

    /// The dev issuer of `picketd dev --oidc`.
    const DEV_ISSUER: &str = "https://picket-dev.invalid";
    const DEV_AUDIENCE: &str = "picket";

    fn dev_oidc_dir(data_dir: &std::path::Path) -> PathBuf {
        data_dir.join("dev-oidc")
    }

    /// Loads (or creates) the dev issuer's key, writes its JWKS and returns the `[oidc]`
    /// section that trusts it.
    fn dev_oidc(data_dir: &std::path::Path) -> Result<OidcSection, String> {
        let dir = dev_oidc_dir(data_dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let issuer =
            DevIssuer::load_or_generate(DEV_ISSUER, DEV_AUDIENCE, &dir.join("signing-key"))?;
        let jwks = dir.join("jwks.json");
        issuer
            .write_jwks(&jwks)
            .map_err(|e| format!("{}: {e}", jwks.display()))?;
        serde_json::from_value(serde_json::json!({
            "issuer": DEV_ISSUER, "audiences": [DEV_AUDIENCE], "jwks_file": jwks,
        }))
        .map_err(|e| format!("dev [oidc] section: {e}"))
    }

    fn dev_token(
        data_dir: &std::path::Path,
        principal: &str,
        roles: &str,
        ttl_s: u64,
    ) -> Result<(), String> {
        let key = dev_oidc_dir(data_dir).join("signing-key");
        if !key.exists() {
            return Err(format!(
                "{} does not exist: start `picketd dev --oidc --data-dir {}` first",
                key.display(),
                data_dir.display()
            ));
        }
        let issuer = DevIssuer::load_or_generate(DEV_ISSUER, DEV_AUDIENCE, &key)?;
        let roles: Vec<&str> = roles
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .collect();
        println!(
            "{}",
            issuer.mint(principal, &roles, Duration::from_secs(ttl_s))
        );
        Ok(())
    }

    fn restore(
        from: &std::path::Path,
        config: &std::path::Path,
        bump: u64,
        floor_from: &[PathBuf],
    ) -> Result<(), String> {
        use picket_server::backup::{read_backup_file, restore_data_dir, restore_floor};
        let config = Config::load(config).map_err(|e| e.to_string())?;
        let backup = read_backup_file(from)?;
        let floor = restore_floor(&backup, floor_from, bump)?;
        let restored = restore_data_dir(&config, &backup, floor.revision)?;
        println!(
            "restored {} from {} (cluster `{}`, revision {}, taken {}) as a replica of the NEW \
             cluster `{}`",
            restored.data_dir.display(),
            from.display(),
            backup.header.cluster_id,
            backup.header.revision,
            picket_server::wall_clock::utc(backup.header.taken_at_unix_ms),
            restored.cluster_id
        );
        for source in &floor.sources {
            println!("  floor source: {source}");
        }
        println!(
            "  restored revision {} = {} + --bump-revision {bump}: every token of the new cluster \
             is above it",
            restored.revision, floor.old_revision_max
        );
        println!(
            "  state digest {:016x} (every replica restored with the same file and flags prints \
             the same)",
            restored.digest
        );
        println!(
            "  kept: {} classes, {} semaphores, {} audit records; ended: {} sessions, {} holds, \
             {} waiters; dropped: {} pending force-releases",
            restored.classes,
            restored.semaphores,
            restored.audit_records,
            restored.sessions_ended,
            restored.holds_ended,
            restored.waiters_dropped,
            restored.force_releases_dropped
        );
        println!(
            "  next: restore every replica of the new cluster the same way, then start each with \
             `picketd run --config CONFIG`"
        );
        Ok(())
    }

    async fn dev(
        data_dir: PathBuf,
        fresh: bool,
        restore: Option<PathBuf>,
        oidc: bool,
        alertmanager_url: Option<String>,
    ) -> Result<(), String> {
        if let Some(url) = &alertmanager_url {
            picket_server::config::check_base_url("--alertmanager-url", url)
                .map_err(|e| e.to_string())?;
        }
        if fresh && data_dir.exists() {
            std::fs::remove_dir_all(&data_dir)
                .map_err(|e| format!("--fresh: cannot remove {}: {e}", data_dir.display()))?;
        }
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| format!("--data-dir {}: {e}", data_dir.display()))?;
        let mut options = dev_options(&data_dir, oidc)?;
        options.console.alertmanager_url = alertmanager_url;
        if let Some(file) = restore {
            let restored = picket_server::dev::restore_dev_data(&options, &data_dir, &file)
                .map_err(|e| format!("--restore {}: {e}", file.display()))?;
            println!(
                "Restored the dev cluster from {} as the NEW cluster `{}` at revision {} \
                 (sessions and holds ended; every new token is above the old cluster's).",
                file.display(),
                restored.cluster_id,
                restored.revision
            );
        }
        options.cluster_id = picket_server::dev::restored_cluster_id(&data_dir);
        let oidc = options.oidc.is_some();
        let cluster = DevCluster::start_with(options)
            .await
            .map_err(|e| format!("{e} (is another `picketd dev` running?)"))?;
        let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
        print_banner(&cluster, &data_dir, leader, oidc);
        let reason =
            wait_for_stop(|| (0..3).any(|i| cluster.node(i).is_none_or(|n| n.driver_finished())))
                .await;
        tracing::info!(reason, "stopping the dev cluster");
        cluster.shutdown().await;
        Ok(())
    }

    /// The options of `picketd dev` (and of the replicas `dev-join` adds to it): fixed ports,
    /// data in `data_dir`, OIDC with the dev issuer when `oidc`.
    fn dev_options(data_dir: &std::path::Path, oidc: bool) -> Result<DevOptions, String> {
        let oidc = if oidc {
            Some(dev_oidc(data_dir)?)
        } else {
            None
        };
        Ok(DevOptions {
            data_dir: Some(data_dir.to_path_buf()),
            ports: Some(DevPorts::DEFAULT),
            oidc,
            // A restored dev cluster keeps the cluster id its restore gave it.
            cluster_id: picket_server::dev::restored_cluster_id(data_dir),
            ..DevOptions::default()
        })
    }

    /// The data directory of the `picketd dev` cluster running on this machine: member 1's
    /// `/healthz` names its storage directory, `<data_dir>/node-1/replica-<generation>`.
    async fn running_dev_data_dir() -> Result<PathBuf, String> {
        let (_, _, http) = DevPorts::of_member(1);
        let url = format!("http://127.0.0.1:{http}/healthz");
        let cannot = |why: String| {
            format!(
                "no running `picketd dev` answered at {url} ({why}): start it first, or name its \
                 data directory with --data-dir"
            )
        };
        let text = reqwest::Client::new()
            .get(&url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| cannot(e.to_string()))?
            .text()
            .await
            .map_err(|e| cannot(e.to_string()))?;
        let health: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| cannot(e.to_string()))?;
        let storage = health["storage"]["generation_dir"]
            .as_str()
            .ok_or_else(|| cannot("its /healthz names no storage directory".to_owned()))?;
        let data_dir = std::path::Path::new(storage)
            .parent()
            .and_then(std::path::Path::parent)
            .ok_or_else(|| cannot(format!("{storage} is not <data_dir>/node-1/replica-N")))?;
        Ok(data_dir.to_path_buf())
    }

    async fn dev_join(data_dir: PathBuf, id: u64, oidc: bool) -> Result<(), String> {
        let options = dev_options(&data_dir, oidc)?;
        let seeds = DevPorts::DEFAULT.members();
        let (client, peer, http) = DevPorts::of_member(id);
        let config = joiner_config(&options, &data_dir, &seeds, id, (client, peer, http))?;
        let node =
            picket_server::server::start(&config, RealDisk, SystemClock::new(), EmptyDataDir::Init)
                .await
                .map_err(|e| format!("{e} (is replica {id} already running?)"))?;
        let who = if options.oidc.is_some() {
            ""
        } else {
            "--principal alice --roles picket-admin "
        };
        println!();
        println!(
            "Replica {id} is up: client http://127.0.0.1:{client}  peer 127.0.0.1:{peer}  http \
             http://127.0.0.1:{http} (data in {}).",
            config.data_dir.display()
        );
        println!("It is nobody's member yet. Add it as a learner, promote it once it follows the log, remove it:");
        println!(
            "  picketctl {who}cluster add {id} --peer-address 127.0.0.1:{peer} --client-address \
             127.0.0.1:{client} --http-address 127.0.0.1:{http} --reason 'try a membership change'"
        );
        println!("  picketctl cluster status");
        println!("  picketctl {who}cluster promote {id} --reason 'caught up'");
        println!("  picketctl {who}cluster remove {id} --reason 'done trying'");
        println!("Stop it with ctrl-c once removed.");
        println!();
        let reason = wait_for_stop(|| node.driver_finished()).await;
        tracing::info!(reason, "stopping the joined replica");
        node.shutdown().await.map_err(|e| e.to_string())?;
        Ok(())
    }

    fn print_banner(
        cluster: &DevCluster,
        data_dir: &std::path::Path,
        leader: Option<usize>,
        oidc: bool,
    ) {
        let endpoints = cluster.client_endpoints();
        println!();
        println!(
            "Picket dev cluster is up (3 replicas, data in {}).",
            data_dir.display()
        );
        for (i, endpoint) in endpoints.iter().enumerate() {
            let peer = &cluster.config(i).me().peer_address;
            let mark = if leader == Some(i) { "  <- leader" } else { "" };
            let http = cluster.http_endpoint(i);
            println!(
                "  node {}  client {endpoint}  peer {peer}  http {http}{mark}",
                i + 1
            );
        }
        println!();
        println!("Console: {}/console/", cluster.http_endpoint(0));
        if oidc {
            println!("  (its sign-in needs insecure dev auth: start without --oidc to use it)");
        } else {
            println!(
                "  (INSECURE dev sign-in: pick any name and roles; sign in as a second person in \
                 a private window for the two-person rule)"
            );
        }
        println!();
        println!(
            "Try (in another terminal; `cargo build --release --bin picketctl` puts picketctl in \
             target/release/):"
        );
        println!("  picketctl session --keep");
        println!("  picketctl lock orders invoice/42 -- sleep 5");
        println!("  picketctl inspect orders invoice/42");
        println!("  picketctl holds orders");
        println!("  picketctl watch orders");
        println!("  picketctl cluster status");
        println!("  picketd dev-join --id 4        # one more replica, to try membership changes");
        if !oidc {
            println!("  picketctl --principal alice --roles picket-operator force-release request orders invoice/42 --token <TOKEN> --reason 'stuck, INC-7' --holder-stopped yes --double-run-acceptable no   # orders is advisory here: answer the checklist");
            println!(
                "  picketctl --principal bob --roles picket-operator force-release approve <ID>   # types the key's kind"
            );
            println!("  picketctl audit");
        }
        println!();
        println!("  curl {}/metrics", cluster.http_endpoint(0));
        let bearer = if oidc {
            " -H \"Authorization: Bearer $TOKEN\""
        } else {
            ""
        };
        // Any node answers: a follower asks the leader (or, with none, answers marked stale).
        println!(
            "  curl{bearer} {}/v1/namespaces/orders/locks/invoice/42",
            cluster.http_endpoint(0)
        );
        println!();
        if oidc {
            println!("Admin calls need an OIDC bearer token from the dev issuer; mint one with:");
            println!(
                "  picketd dev-token --data-dir {} --principal alice --roles picket-operator",
                data_dir.display()
            );
            println!("and send it as `authorization: Bearer <token>`.");
        } else {
            println!(
                "Admin calls use INSECURE dev auth: principal and roles come from the \
                 x-picket-principal / x-picket-roles metadata (no token). For OIDC tokens, start \
                 with --oidc and mint them with `picketd dev-token`."
            );
        }
        println!("Stop with ctrl-c; `picketd dev` again recovers the data, `--fresh` wipes it.");
        println!();
    }

    /// Waits for ctrl-c, SIGTERM or `failed()` (checked every second); says which.
    async fn wait_for_stop(failed: impl Fn() -> bool) -> &'static str {
        #[cfg(unix)]
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        loop {
            #[cfg(unix)]
            let sigterm = async {
                match term.as_mut() {
                    Some(term) => {
                        term.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            #[cfg(not(unix))]
            let sigterm = std::future::pending::<()>();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => return "interrupt (ctrl-c)",
                () = sigterm => return "SIGTERM",
                () = tokio::time::sleep(Duration::from_secs(1)) => {
                    if failed() {
                        return "the node driver stopped (see the errors above)";
                    }
                }
            }
        }
    }
}

#[cfg(not(madsim))]
fn main() -> std::process::ExitCode {
    real::main()
}

#[cfg(madsim)]
fn main() {
    eprintln!("picketd is not built for the simulator; sim/ starts replicas through picket_server::server::start");
}
