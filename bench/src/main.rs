//! `picket-bench`: the closed-loop lock workloads of the etcd/ZooKeeper reference
//! (`../shared/bench/lockbench`), re-implemented 1:1 against a Picket cluster.
//!
//! Workloads (one op each; every logical client runs ops back to back):
//! - `lock`: setup (untimed) creates one session per client (TTL `--lease-ttl`, 60 s) through
//!   the public client library (`picket_client`), one `Client` (= one HTTP/2 connection)
//!   per client. op = `Session::lock(namespace, "<prefix>/lock/<k>")` (waits in the FIFO queue)
//!   then `LockGuard::release`; latency = lock sent .. release answered. k = 0 for `--keys 1`,
//!   else `splitmix64(client) % keys`.
//! - `lock-fresh`: a session per op: create_session ; lock ; release ; close.
//! - `inspect`: a linearizable read per op, `Admin.Inspect` of key k (`allow_stale` false),
//!   one `Client` per logical client: the read path (`[timing] read_mode`, read index or lease;
//!   issue 39's A/B). Not one of the reference's workloads: no etcd or ZooKeeper figure.
//! - `keepalive`: one session and one `KeepAlive` stream per client, opened on the raw generated
//!   tonic client (the library keeps its sessions alive by itself every ttl/3 and has no knob to
//!   send one keepalive on demand); op = send `{session_id, seq}`, wait for the reply with `seq`.
//! - `probe-fsync`, `probe-tcp`: the disk's write + fdatasync and a loopback TCP round trip
//!   (`probe.rs`), the inputs of `scripts/bench`'s limit model.
//! - `probe-commit`: the measured floor of a quorum commit, three plain processes (this binary
//!   re-executed with the hidden `--role`) with blocking sockets and no runtime (`commit/`).
//! - `count-pcap`: the TCP segments with payload of a pcap capture, by client and peer ports
//!   (`pcap.rs`), the counter behind `scripts/bench-rtt`'s round trips per operation.
//! - `failover`: the `lock` workload on all endpoints; at `--kill-at-s` the leader is killed with
//!   `kill -9` (its PID from `--pids`, in the order of `--endpoints`); reports the time until
//!   grants resume and the failed and lost operations (see `failover.rs`).
//!
//! Measurement (as the reference): t0 = all clients set up; clients stop issuing at
//! t0 + warmup + duration; ops completing in [t0 + warmup, t0 + warmup + duration] are counted;
//! ops_per_s = counted / duration; p50/p99 nearest-rank. stdout: one line
//! `<system> <label> <ops_per_s> <p50_ms> <p99_ms>`; details on stderr, among them (with
//! `--pids`) the servers' and the client's CPU microseconds and context switches per counted
//! op over the same window (`usage.rs`).

mod commit;
mod failover;
mod pcap;
mod probe;
mod stats;
mod usage;
mod workload;

use clap::Parser;

/// Closed-loop lock benchmark against a Picket cluster (see the crate docs).
#[derive(Parser, Clone, Debug)]
#[command(name = "picket-bench")]
pub struct Args {
    /// lock | lock-fresh | inspect | keepalive | failover | probe-fsync | probe-tcp | probe-commit |
    /// count-pcap
    #[arg(long, default_value = "lock")]
    pub workload: String,
    /// Client endpoints of the replicas, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403"
    )]
    pub endpoints: Vec<String>,
    /// leader: every client talks to the leader (found through the client library's leader
    /// following); all: client i starts at endpoint i % n.
    #[arg(long, default_value = "leader")]
    pub target: String,
    #[arg(long, default_value_t = 1)]
    pub clients: usize,
    #[arg(long, default_value_t = 1)]
    pub keys: u64,
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    #[arg(long, default_value_t = 2.0)]
    pub warmup_s: f64,
    /// In-flight ops may finish this long after the window; then the process aborts.
    #[arg(long, default_value_t = 30.0)]
    pub grace_s: f64,
    /// Ops per client at most.
    #[arg(long, default_value_t = 10_000_000)]
    pub max_ops: u64,
    /// Session TTL in seconds (the reference's lease TTL).
    #[arg(long, default_value_t = 60)]
    pub lease_ttl: u64,
    /// Picket namespace of the lock keys.
    #[arg(long, default_value = "bench")]
    pub namespace: String,
    /// Key prefix (keys are `<prefix>/lock/<k>`); default `/anchor/<pid>`.
    #[arg(long, default_value = "")]
    pub prefix: String,
    #[arg(long, default_value = "")]
    pub label: String,
    /// Tokio worker threads of the client.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    #[arg(long, default_value = "picket")]
    pub system: String,
    /// Replica PIDs, in the order of --endpoints. failover: whom to kill; the other workloads:
    /// whose CPU time and context switches to count over the window.
    #[arg(long, value_delimiter = ',')]
    pub pids: Vec<u32>,
    /// failover: when to kill the leader, seconds after t0.
    #[arg(long, default_value_t = 4.0)]
    pub kill_at_s: f64,
    /// How the client library talks to the cluster: stream (one Session stream per client,
    /// the library's default) or unary (unary calls, a KeepAlive stream per session): the A/B.
    #[arg(long, default_value = "stream", value_parser = ["stream", "unary"])]
    pub transport: String,
    /// probe-fsync: the directory of the probe's file (the disk the data directories are on).
    #[arg(long, default_value = ".")]
    pub probe_dir: std::path::PathBuf,
    /// probe-commit: where its temporary directory (the three processes' logs) goes; default
    /// the target directory the binary is in.
    #[arg(long)]
    pub data_dir: Option<std::path::PathBuf>,
    /// count-pcap: the capture to count (classic pcap, `dumpcap -P`).
    #[arg(long)]
    pub pcap: Option<std::path::PathBuf>,
    /// count-pcap: the ports clients connect to (a segment to one is a client's message).
    #[arg(long, value_delimiter = ',')]
    pub client_ports: Vec<u16>,
    /// count-pcap: the ports replicas connect to each other on.
    #[arg(long, value_delimiter = ',')]
    pub peer_ports: Vec<u16>,
    /// probe-commit's own processes: leader | follower (set when it re-executes itself).
    #[arg(long, default_value = "", hide = true)]
    pub role: String,
    /// probe-commit's leader: the followers' addresses.
    #[arg(long, value_delimiter = ',', hide = true)]
    pub followers: Vec<String>,
}

fn main() {
    let mut args = Args::parse();
    if !args.role.is_empty() {
        let dir = args.data_dir.clone().unwrap_or_else(|| ".".into());
        std::process::exit(commit::serve(&args.role, &dir, &args.followers));
    }
    if args.workload == "count-pcap" {
        std::process::exit(pcap::run(&args));
    }
    if args.clients == 0 || args.keys == 0 || args.duration_s <= 0.0 || args.warmup_s < 0.0 {
        eprintln!("picket-bench: --clients, --keys and --duration-s must be above zero");
        std::process::exit(64);
    }
    if args.workload.starts_with("probe-") {
        std::process::exit(probe::run(&args));
    }
    if args.prefix.is_empty() {
        args.prefix = format!("/anchor/{}", std::process::id());
    }
    if args.label.is_empty() {
        args.label = format!("{}-k{}-c{}", args.workload, args.keys, args.clients);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = runtime.block_on(async move {
        match args.workload.as_str() {
            "failover" => failover::run(args).await,
            "lock" | "lock-fresh" | "inspect" | "keepalive" => workload::run(args).await,
            other => {
                eprintln!("picket-bench: unknown workload {other:?}");
                64
            }
        }
    });
    std::process::exit(code);
}
