//! Setup, the closed loop and the report of the `lock`, `lock-fresh` and `keepalive` workloads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use picket_client::{Client, ClientConfig, ClientError, Session, Transport};
use picket_proto::proto::{self, lock_client::LockClient};
use tokio::sync::mpsc;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::Streaming;

use crate::stats::{self, Sample, SplitMix64};
use crate::usage::Usage;
use crate::Args;

/// Keepalive replies and requests buffered per stream (one is in flight at a time).
const KEEPALIVE_QUEUE: usize = 4;

/// `http://host:port` -> `host:port`.
fn bare(endpoint: &str) -> String {
    endpoint
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// The client configuration of one logical client: `endpoints` in the order to try them.
pub fn config(args: &Args, endpoints: Vec<String>) -> ClientConfig {
    let mut config = ClientConfig::new(endpoints, "picket-bench");
    config.session_ttl = Some(Duration::from_secs(args.lease_ttl));
    config.transport = match args.transport.as_str() {
        "unary" => Transport::Unary,
        _ => Transport::Stream,
    };
    config
}

/// The endpoint order for client `i`: the leader first (`--target leader`), or endpoint
/// `i % n` first (`all`); the others follow, so the library can follow a new leader.
pub fn order_for(args: &Args, leader: Option<&str>, i: usize) -> Vec<String> {
    let n = args.endpoints.len();
    let first = match (args.target.as_str(), leader) {
        ("leader", Some(leader)) => args
            .endpoints
            .iter()
            .position(|e| bare(e) == bare(leader))
            .unwrap_or(0),
        _ => i % n,
    };
    (0..n)
        .map(|j| args.endpoints[(first + j) % n].clone())
        .collect()
}

/// Finds the leader: a session created through the library lands on it (it follows
/// `not_leader` hints); its guess is then the leader's endpoint. The probe session is closed.
pub async fn find_leader(args: &Args) -> Result<String, ClientError> {
    let client = Client::new(config(args, args.endpoints.clone()))?;
    let session = client.create_session().await?;
    let leader = bare(&client.leader_guess());
    let _ = session.close().await;
    Ok(leader)
}

/// The key of op for key number `k`.
pub fn key_name(args: &Args, k: u64) -> String {
    format!("{}/lock/{k}", args.prefix)
}

/// One `lock` op: lock (waiting in the queue), then release. Answers the grant's token.
pub async fn lock_op(args: &Args, session: &Session, k: u64) -> Result<u64, ClientError> {
    let guard = session.lock(&args.namespace, &key_name(args, k)).await?;
    let token = guard.token().0;
    guard.release().await?;
    Ok(token)
}

/// What one logical client holds between ops.
enum Prepared {
    Lock {
        session: Session,
    },
    Fresh {
        client: Client,
    },
    /// `inspect`: linearizable reads, one `Client` (connection) per logical client.
    Inspect {
        client: Client,
    },
    KeepAlive {
        session_id: u64,
        /// Drawn by the server (the request sent none) and returned once.
        session_secret: Vec<u8>,
        seq: u64,
        requests: mpsc::Sender<proto::KeepAliveRequest>,
        replies: Box<Streaming<proto::KeepAliveResponse>>,
        channel: Channel,
    },
}

async fn prepare(args: &Args, endpoints: Vec<String>) -> Result<Prepared, String> {
    match args.workload.as_str() {
        "lock" => {
            let client = Client::new(config(args, endpoints)).map_err(|e| e.to_string())?;
            let session = client.create_session().await.map_err(|e| e.to_string())?;
            Ok(Prepared::Lock { session })
        }
        "lock-fresh" => {
            let client = Client::new(config(args, endpoints)).map_err(|e| e.to_string())?;
            Ok(Prepared::Fresh { client })
        }
        "inspect" => {
            let client = Client::new(config(args, endpoints)).map_err(|e| e.to_string())?;
            Ok(Prepared::Inspect { client })
        }
        _ => prepare_keepalive(args, &endpoints[0]).await,
    }
}

/// One connection, one session (`CreateSession` with the TTL), one `KeepAlive` stream.
async fn prepare_keepalive(args: &Args, endpoint: &str) -> Result<Prepared, String> {
    let channel = Endpoint::from_shared(format!("http://{}", bare(endpoint)))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect {endpoint}: {e}"))?;
    let mut lock = LockClient::new(channel.clone());
    let created = lock
        .create_session(proto::CreateSessionRequest {
            ttl_ms: Some(args.lease_ttl * 1000),
            identity: Some(proto::ClientIdentity {
                name: "picket-bench".into(),
                host: String::new(),
                pid: std::process::id(),
            }),
            // None: the server draws the secret and returns it once.
            session_secret: Vec::new(),
        })
        .await
        .map_err(|e| format!("create_session: {e}"))?
        .into_inner();
    if created.session_secret.is_empty() {
        return Err("create_session: the server returned no session secret".into());
    }
    let (requests, rx) = mpsc::channel(KEEPALIVE_QUEUE);
    let replies = lock
        .keep_alive(ReceiverStream::new(rx))
        .await
        .map_err(|e| format!("keep_alive: {e}"))?
        .into_inner();
    Ok(Prepared::KeepAlive {
        session_id: created.session_id,
        session_secret: created.session_secret,
        seq: 0,
        requests,
        replies: Box::new(replies),
        channel,
    })
}

async fn one_op(args: &Args, prepared: &mut Prepared, k: u64) -> Result<(), String> {
    match prepared {
        Prepared::Lock { session } => lock_op(args, session, k)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Prepared::Fresh { client } => {
            let session = client.create_session().await.map_err(|e| e.to_string())?;
            lock_op(args, &session, k)
                .await
                .map_err(|e| e.to_string())?;
            session.close().await.map(|_| ()).map_err(|e| e.to_string())
        }
        Prepared::Inspect { client } => {
            let info = client
                .inspect(proto::InspectRequest {
                    namespace: args.namespace.clone(),
                    key: key_name(args, k),
                    allow_stale: false,
                })
                .await
                .map_err(|e| e.to_string())?;
            if info.revision == 0 {
                return Err("inspect answered revision 0 (nothing applied?)".into());
            }
            Ok(())
        }
        Prepared::KeepAlive {
            session_id,
            session_secret,
            seq,
            requests,
            replies,
            ..
        } => {
            *seq += 1;
            let request = proto::KeepAliveRequest {
                session_id: *session_id,
                seq: *seq,
                session_secret: session_secret.clone(),
            };
            requests
                .send(request)
                .await
                .map_err(|_| "keepalive stream closed".to_owned())?;
            match replies.message().await.map_err(|e| e.to_string())? {
                Some(r) if r.seq == *seq && !r.lost && r.ttl_ms > 0 && r.error.is_none() => Ok(()),
                Some(r) => Err(format!(
                    "keepalive reply seq={} (sent {}) ttl_ms={} lost={} error={:?}",
                    r.seq, seq, r.ttl_ms, r.lost, r.error
                )),
                None => Err("keepalive stream ended".into()),
            }
        }
    }
}

/// Closes what setup opened (untimed, best effort).
async fn cleanup(prepared: Prepared) {
    let bound = Duration::from_secs(5);
    match prepared {
        Prepared::Lock { session } => {
            let _ = tokio::time::timeout(bound, session.close()).await;
        }
        Prepared::Fresh { .. } | Prepared::Inspect { .. } => {}
        Prepared::KeepAlive {
            session_id,
            session_secret,
            channel,
            requests,
            ..
        } => {
            drop(requests);
            let mut lock = LockClient::new(channel);
            let close = lock.close_session(proto::CloseSessionRequest {
                session_id,
                session_secret,
            });
            let _ = tokio::time::timeout(bound, close).await;
        }
    }
}

/// What one logical client measured.
pub struct ClientResult {
    pub samples: Vec<Sample>,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// Runs the workload and prints the summary line. Answers the exit status.
pub async fn run(args: Args) -> i32 {
    let leader = if args.target == "leader" {
        match find_leader(&args).await {
            Ok(leader) => Some(leader),
            Err(e) => {
                eprintln!("picket-bench: could not find the leader: {e}");
                return 3;
            }
        }
    } else {
        None
    };
    let mut prepared = Vec::with_capacity(args.clients);
    for i in 0..args.clients {
        let endpoints = order_for(&args, leader.as_deref(), i);
        match prepare(&args, endpoints).await {
            Ok(p) => prepared.push(p),
            Err(e) => {
                eprintln!("picket-bench: setup of client {i}: {e}");
                return 3;
            }
        }
    }
    let warm = Duration::from_secs_f64(args.warmup_s);
    let duration = Duration::from_secs_f64(args.duration_s);
    let t0 = Instant::now();
    let stop_at = t0 + warm + duration;
    // Every client stopped (`--max-ops` reached before the window's end): the window closes.
    let (all_done, clients_done) = tokio::sync::watch::channel(false);
    let usage = tokio::spawn(window_usage(
        args.pids.clone(),
        (t0 + warm).into(),
        stop_at.into(),
        clients_done,
    ));
    let shared = Arc::new(args.clone());
    let mut handles = Vec::with_capacity(args.clients);
    for (i, mut p) in prepared.into_iter().enumerate() {
        let args = shared.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = SplitMix64::for_client(i);
            let mut result = ClientResult {
                samples: Vec::with_capacity(16_384),
                errors: 0,
                first_error: None,
            };
            let mut n = 0u64;
            while n < args.max_ops && Instant::now() < stop_at {
                let k = if args.keys == 1 {
                    0
                } else {
                    rng.next_u64() % args.keys
                };
                let start = Instant::now();
                match one_op(&args, &mut p, k).await {
                    Ok(()) => {
                        let end = Instant::now();
                        result.samples.push(Sample {
                            end_us: (end - t0).as_micros() as u64,
                            latency_us: (end - start).as_micros().min(u128::from(u32::MAX)) as u32,
                        });
                    }
                    Err(e) => {
                        result.errors += 1;
                        result.first_error.get_or_insert(e);
                        if result.errors > 1000 {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                n += 1;
            }
            cleanup(p).await;
            result
        }));
    }
    let hard = warm + duration + Duration::from_secs_f64(args.grace_s);
    let Ok(results) = tokio::time::timeout(hard, join_all(handles)).await else {
        eprintln!("picket-bench: hard deadline {hard:?} exceeded, aborting");
        return 4;
    };
    let _ = all_done.send(true);
    let endpoints = match &leader {
        Some(leader) => vec![leader.clone()],
        None => args.endpoints.clone(),
    };
    let usage = usage.await.ok();
    report(&args, &endpoints, t0, &results, usage)
}

/// What the client and the servers (`pids`) used from `start` to `end`: sampled at both ends
/// of the counting window, so it divides by the counted ops. The window ends early when
/// `clients_done` turns true (every client stopped at `--max-ops`): no op completes after it.
async fn window_usage(
    pids: Vec<u32>,
    start: tokio::time::Instant,
    end: tokio::time::Instant,
    mut clients_done: tokio::sync::watch::Receiver<bool>,
) -> WindowUsage {
    tokio::select! {
        _ = tokio::time::sleep_until(start) => {}
        _ = clients_done.wait_for(|done| *done) => {}
    }
    let (client, servers) = (Usage::of("self"), Usage::of_all(&pids));
    tokio::select! {
        _ = tokio::time::sleep_until(end) => {}
        _ = clients_done.wait_for(|done| *done) => {}
    }
    WindowUsage {
        client: Usage::of("self").since(client),
        servers: (!pids.is_empty()).then(|| Usage::of_all(&pids).since(servers)),
    }
}

/// The client's and the servers' usage over the counting window.
struct WindowUsage {
    client: Usage,
    servers: Option<Usage>,
}

/// Joins the client tasks; a task that panicked counts as one error.
pub async fn join_all(handles: Vec<tokio::task::JoinHandle<ClientResult>>) -> Vec<ClientResult> {
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.unwrap_or_else(|e| ClientResult {
            samples: Vec::new(),
            errors: 1,
            first_error: Some(format!("client task failed: {e}")),
        }));
    }
    out
}

/// Prints the summary line (stdout) and the details (stderr). Answers the exit status.
fn report(
    args: &Args,
    endpoints: &[String],
    t0: Instant,
    results: &[ClientResult],
    usage: Option<WindowUsage>,
) -> i32 {
    let window_start = (args.warmup_s * 1e6) as u64;
    let window_end = ((args.warmup_s + args.duration_s) * 1e6) as u64;
    let all: Vec<Sample> = results
        .iter()
        .flat_map(|r| r.samples.iter().copied())
        .collect();
    let latencies = stats::counted(&all, window_start, window_end);
    let errors: u64 = results.iter().map(|r| r.errors).sum();
    let first_error = results.iter().find_map(|r| r.first_error.clone());
    let n = latencies.len();
    println!(
        "{} {} {:.1} {:.3} {:.3}",
        args.system,
        args.label,
        n as f64 / args.duration_s,
        stats::percentile_ms(&latencies, 50.0),
        stats::percentile_ms(&latencies, 99.0)
    );
    eprintln!(
        "# {} {}: workload={} clients={} keys={} endpoints={:?} counted={} total_ok={} errors={} \
         mean_ms={:.3} p99.9_ms={:.3} max_ms={:.3} window_s={} client_cpu_s={:.2} client_wall_s={:.2}",
        args.system,
        args.label,
        args.workload,
        args.clients,
        args.keys,
        endpoints,
        n,
        all.len(),
        errors,
        stats::mean_ms(&latencies),
        stats::percentile_ms(&latencies, 99.9),
        latencies.last().map_or(f64::NAN, |&l| f64::from(l) / 1000.0),
        args.duration_s,
        self_cpu_seconds(),
        t0.elapsed().as_secs_f64(),
    );
    if let Some(usage) = usage {
        // One line scripts/bench reads: per counted op, over the counting window.
        let servers = usage.servers.map_or(("-".to_owned(), "-".to_owned()), |s| {
            (
                format!("{:.0}", s.cpu_us_per(n)),
                format!("{:.1}", s.switches_per(n)),
            )
        });
        eprintln!(
            "# {} {}: per_op cpu_us_servers={} cpu_us_client={:.0} switches_servers={} \
             switches_client={:.1}",
            args.system,
            args.label,
            servers.0,
            usage.client.cpu_us_per(n),
            servers.1,
            usage.client.switches_per(n),
        );
    }
    if let Some(e) = first_error {
        eprintln!("# first error: {e}");
    }
    if n == 0 {
        5
    } else {
        0
    }
}

/// utime + stime of this process from `/proc/self/stat`, in seconds (USER_HZ = 100).
pub fn self_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let Some(close) = stat.rfind(')') else {
        return f64::NAN;
    };
    let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|x| x.parse::<f64>().ok());
    match (field(11), field(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}
