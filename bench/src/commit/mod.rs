//! `probe-commit`: the floor of a quorum commit on this machine (issue 39). Three plain
//! processes, blocking sockets and threads, no runtime: this binary re-executed as the leader
//! and two followers (hidden `--role`), all on 127.0.0.1, their logs in a temporary directory
//! under `--data-dir` (default: the target directory the binary is in).
//!
//! One operation: a client sends a ~200-byte request over TCP to the leader; the leader sends
//! a 2 KiB entry per request to both followers (one frame per follower per batch), then writes
//! the batch to its own log with one `pwrite` and `fdatasync`; each follower does the same and
//! acknowledges; the leader replies once its own sync is done and one follower acknowledged
//! (2 of 3 durable). With `--clients 1` the commits are serial; with more, each client has
//! its own connection and one request in flight, and the leader group-commits: the requests
//! that arrived while the previous batch committed go into one write + sync and one message
//! per follower (`group.rs`).
//!
//! The window and figures are the lock workloads': clients start together at t0, stop issuing
//! at t0 + warmup + duration, ops completing inside `[t0 + warmup, t0 + warmup + duration]`
//! are counted. stderr has the children's PIDs and, over the window, the CPU microseconds and
//! context switches per op of the three processes (`servers`) and of the clients (`client`).
//! Every child is killed by PID and reaped when the probe ends, on error paths too, and exits
//! by itself when this process's end closes its stdin; the directory is then removed.

mod frame;
mod group;
mod roles;

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Barrier};
use std::time::{Duration, Instant};

use crate::stats::{self, Sample};
use crate::usage::Usage;
use crate::Args;

pub use roles::serve;

/// Bytes of the log entry each request becomes.
const ENTRY_BYTES: usize = 2048;
/// Bytes of a request's payload: with its 12-byte header, a 200-byte request.
const REQUEST_PAYLOAD_BYTES: usize = 200 - frame::HEADER_BYTES;
/// The leader refuses a larger request frame.
const REQUEST_PAYLOAD_BYTES_MAX: usize = REQUEST_PAYLOAD_BYTES;
/// Requests per batch at most.
const BATCH_REQUESTS_MAX: usize = 1024;
/// Client connections the leader accepts at most (and so requests waiting for a batch: each
/// client has one in flight).
const CONNECTIONS_MAX: usize = BATCH_REQUESTS_MAX;
/// The largest append a follower accepts.
const APPEND_PAYLOAD_BYTES_MAX: usize = BATCH_REQUESTS_MAX * ENTRY_BYTES;
/// How long a child may take to listen (its log file is laid out first).
const CHILD_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// A reply later than this is an error, not a figure.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Sorted latencies in microseconds and the time they were counted over.
pub type Measured = (Vec<u32>, Duration);

/// Starts the three processes, drives `args.clients` closed-loop clients through the window,
/// stops everything. Answers the counted latencies.
pub fn run(args: &Args, label: &str) -> io::Result<Measured> {
    if args.clients > CONNECTIONS_MAX {
        return Err(io::Error::other(format!(
            "--clients {} is above the probe's bound of {CONNECTIONS_MAX}",
            args.clients
        )));
    }
    let parent = match &args.data_dir {
        Some(dir) => dir.clone(),
        None => target_dir()?,
    };
    // Declared first, dropped last: the children are gone before their files are removed.
    let dir = TempDir::create(parent.join(format!("probe-commit-{}", std::process::id())))?;
    let mut children = Children::default();
    let f1 = children.spawn("follower", &dir.path, &[])?;
    let f2 = children.spawn("follower", &dir.path, &[])?;
    let followers = format!("127.0.0.1:{f1},127.0.0.1:{f2}");
    let leader = children.spawn("leader", &dir.path, &["--followers", &followers])?;
    let pids = children.pids();
    eprintln!(
        "# probe {label}: pids followers={},{} leader={} dir={}",
        pids[0],
        pids[1],
        pids[2],
        dir.path.display()
    );
    drive(args, label, leader, &pids)
}

/// `<target>` of `<target>/<profile>/picket-bench`.
fn target_dir() -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| io::Error::other(format!("no target directory above {}", exe.display())))
}

/// A directory removed (with what is in it) when dropped.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn create(path: PathBuf) -> io::Result<TempDir> {
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!(
                "picket-bench: could not remove {}: {e}",
                self.path.display()
            );
        }
    }
}

/// The role processes; each is killed by its PID and reaped when this is dropped.
#[derive(Default)]
struct Children {
    running: Vec<Child>,
}

impl Children {
    /// Starts this binary as `role` with its files in `dir`; answers the port it announced.
    fn spawn(&mut self, role: &str, dir: &Path, more_args: &[&str]) -> io::Result<u16> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--workload", "probe-commit", "--role", role, "--data-dir"])
            .arg(dir)
            .args(more_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let pid = child.id();
        // Pushed before waiting for it, so that a failure below still kills it.
        self.running.push(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(read.map(|_| line));
        });
        let line = rx.recv_timeout(CHILD_READY_TIMEOUT).map_err(|_| {
            io::Error::other(format!("the {role} ({pid}) did not listen in time"))
        })??;
        line.trim()
            .strip_prefix("port ")
            .and_then(|port| port.parse().ok())
            .ok_or_else(|| {
                io::Error::other(format!("process {pid} announced {line:?}, not a port"))
            })
    }

    fn pids(&self) -> Vec<u32> {
        self.running.iter().map(Child::id).collect()
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // The leader (started last) first, so that it does not report its followers' end.
        for child in self.running.iter_mut().rev() {
            // SIGKILL to its PID; an error means it already exited, and wait reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One client's completed ops, or the error that stopped it.
type ClientRun = io::Result<Vec<Sample>>;

/// The closed loop of every client against the leader on `port`, and the usage over the window.
fn drive(args: &Args, label: &str, port: u16, pids: &[u32]) -> io::Result<Measured> {
    let connections = (0..args.clients)
        .map(|_| {
            let stream = TcpStream::connect(("127.0.0.1", port))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
            Ok(stream)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let warmup = Duration::from_secs_f64(args.warmup_s);
    let duration = Duration::from_secs_f64(args.duration_s);
    // The client threads live until the usage is sampled at the window's end: a thread that
    // exited is no longer in /proc/self/task, and its switches would drop out of the sum.
    let sampled = Barrier::new(args.clients + 1);
    let t0 = Instant::now();
    let (runs, usage) = std::thread::scope(|scope| {
        let clients: Vec<_> = connections
            .into_iter()
            .map(|stream| {
                let sampled = &sampled;
                scope.spawn(move || {
                    let run = client(stream, t0, warmup + duration);
                    sampled.wait();
                    run
                })
            })
            .collect();
        let usage = scope.spawn(|| {
            let usage = window_usage(pids, t0 + warmup, t0 + warmup + duration);
            sampled.wait();
            usage
        });
        let runs: Vec<ClientRun> = clients
            .into_iter()
            .map(|c| {
                c.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a client panicked")))
            })
            .collect();
        (
            runs,
            usage.join().expect("the usage sampler does not panic"),
        )
    });
    let mut all = Vec::new();
    for run in runs {
        all.extend(run?);
    }
    let window_start_us = warmup.as_micros() as u64;
    let window_end_us = (warmup + duration).as_micros() as u64;
    let latencies = stats::counted(&all, window_start_us, window_end_us);
    let (servers, client) = usage;
    let n = latencies.len();
    eprintln!(
        "# probe {label}: per_op cpu_us_servers={:.0} cpu_us_client={:.0} switches_servers={:.1} \
         switches_client={:.1} counted={n} clients={}",
        servers.cpu_us_per(n),
        client.cpu_us_per(n),
        servers.switches_per(n),
        client.switches_per(n),
        args.clients,
    );
    Ok((latencies, duration))
}

/// One closed-loop client: request, wait for its reply, again, until `stop` after `t0`.
fn client(mut stream: TcpStream, t0: Instant, stop: Duration) -> ClientRun {
    let mut request = frame::encode(0, &[0xa5; REQUEST_PAYLOAD_BYTES]);
    let mut payload = Vec::new();
    let mut samples = Vec::with_capacity(65_536);
    let mut id = 0u64;
    while t0.elapsed() < stop {
        id += 1;
        request[..frame::HEADER_BYTES].copy_from_slice(&frame::header(id, REQUEST_PAYLOAD_BYTES));
        let start = Instant::now();
        stream.write_all(&request)?;
        match frame::read(&mut stream, &mut payload, 0)? {
            Some(answered) if answered == id => {}
            Some(answered) => {
                return Err(io::Error::other(format!(
                    "reply to {answered}, awaiting {id}"
                )))
            }
            None => return Err(io::Error::other("the leader closed the connection")),
        }
        let end = Instant::now();
        samples.push(Sample {
            end_us: end.duration_since(t0).as_micros() as u64,
            latency_us: u32::try_from(end.duration_since(start).as_micros()).unwrap_or(u32::MAX),
        });
    }
    Ok(samples)
}

/// The three processes' and this one's usage from `start` to `end`.
fn window_usage(pids: &[u32], start: Instant, end: Instant) -> (Usage, Usage) {
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let (servers, client) = (Usage::of_all(pids), Usage::of("self"));
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    (
        Usage::of_all(pids).since(servers),
        Usage::of("self").since(client),
    )
}
