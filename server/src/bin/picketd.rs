//! `picketd`: the Picket replica daemon.

#[cfg(not(madsim))]
mod real {
    use std::path::PathBuf;
    use std::time::Duration;

    use clap::{Parser, Subcommand};
    use picket_server::clock::SystemClock;
    use picket_server::config::Config;
    use picket_server::dev::{DevCluster, DevOptions, DevPorts};
    use picket_storage::RealDisk;

    /// Picket: a distributed lock service with fencing tokens (one replica per process).
    ///
    /// Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=picket_server=debug) to change the level.
    #[derive(Parser, Debug)]
    #[command(name = "picketd", version, about, long_about)]
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
        Run {
            /// The TOML configuration file (node_id, data_dir, members, timing, tls, ...).
            #[arg(long, short)]
            config: PathBuf,
            /// Believe the x-picket-principal / x-picket-roles request metadata as the caller's
            /// identity and roles. DEVELOPMENT ONLY: anyone can claim any role.
            #[arg(long)]
            insecure_dev_auth: bool,
        },
        /// Start a local 3-replica cluster in this process, for a first try.
        ///
        /// Clients: 127.0.0.1:7401, 7402, 7403; peers: 127.0.0.1:7411, 7412, 7413. Data is kept in
        /// --data-dir (restarting `picketd dev` recovers it; --fresh wipes it first). Dev auth is
        /// on: admin calls take their principal and roles from request metadata.
        Dev {
            /// Where the three replicas keep their data.
            #[arg(long, default_value = "./picket-dev-data")]
            data_dir: PathBuf,
            /// Delete the data directory first.
            #[arg(long)]
            fresh: bool,
        },
        /// Check a configuration file and exit (0 if it is valid).
        CheckConfig {
            #[arg(long, short)]
            config: PathBuf,
        },
    }

    pub fn main() -> std::process::ExitCode {
        let cli = Cli::parse();
        init_logging();
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("picketd: cannot start the async runtime: {error}");
                return std::process::ExitCode::FAILURE;
            }
        };
        let result = runtime.block_on(async move {
            match cli.command {
                Command::Run {
                    config,
                    insecure_dev_auth,
                } => run(config, insecure_dev_auth).await,
                Command::Dev { data_dir, fresh } => dev(data_dir, fresh).await,
                Command::CheckConfig { config } => Config::load(&config)
                    .map(|c| println!("{}: valid (node {})", config.display(), c.node_id))
                    .map_err(|e| e.to_string()),
            }
        });
        match result {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("picketd: {message}");
                std::process::ExitCode::FAILURE
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

    async fn run(path: PathBuf, insecure_dev_auth: bool) -> Result<(), String> {
        let mut config = Config::load(&path).map_err(|e| e.to_string())?;
        config.insecure_dev_auth |= insecure_dev_auth;
        if config.insecure_dev_auth {
            tracing::warn!("insecure dev auth: callers' x-picket-principal / x-picket-roles metadata is believed");
        }
        let node = picket_server::server::start(&config, RealDisk, SystemClock::new())
            .await
            .map_err(|e| e.to_string())?;
        let reason = wait_for_stop(|| node.driver_finished()).await;
        tracing::info!(reason, "stopping");
        node.shutdown().await.map_err(|e| e.to_string())?;
        tracing::info!("stopped");
        Ok(())
    }

    async fn dev(data_dir: PathBuf, fresh: bool) -> Result<(), String> {
        if fresh && data_dir.exists() {
            std::fs::remove_dir_all(&data_dir)
                .map_err(|e| format!("--fresh: cannot remove {}: {e}", data_dir.display()))?;
        }
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| format!("--data-dir {}: {e}", data_dir.display()))?;
        let options = DevOptions {
            data_dir: Some(data_dir.clone()),
            ports: Some(DevPorts::DEFAULT),
            ..DevOptions::default()
        };
        let cluster = DevCluster::start_with(options)
            .await
            .map_err(|e| format!("{e} (is another `picketd dev` running?)"))?;
        let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
        print_banner(&cluster, &data_dir, leader);
        let reason =
            wait_for_stop(|| (0..3).any(|i| cluster.node(i).is_none_or(|n| n.driver_finished())))
                .await;
        tracing::info!(reason, "stopping the dev cluster");
        cluster.shutdown().await;
        Ok(())
    }

    fn print_banner(cluster: &DevCluster, data_dir: &std::path::Path, leader: Option<usize>) {
        let endpoints = cluster.client_endpoints();
        println!();
        println!(
            "Picket dev cluster is up (3 replicas, data in {}).",
            data_dir.display()
        );
        for (i, endpoint) in endpoints.iter().enumerate() {
            let peer = &cluster.config(i).me().peer_address;
            let mark = if leader == Some(i) { "  <- leader" } else { "" };
            println!("  node {}  client {endpoint}  peer {peer}{mark}", i + 1);
        }
        println!();
        println!("Try (in another terminal):");
        println!("  picketctl session");
        println!("  picketctl lock orders invoice/42 -- sleep 5");
        println!("  picketctl inspect orders invoice/42");
        println!("  picketctl holds orders");
        println!("  picketctl watch orders");
        println!();
        println!("Admin calls use dev auth: their principal and roles come from request metadata.");
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
