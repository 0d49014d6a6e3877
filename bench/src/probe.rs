//! The physical probes behind `scripts/bench`'s limit model (docs/PERFORMANCE.md, "The limit
//! model"): what one durable write and one loopback round trip cost on this machine, measured in
//! the same run as the systems.
//!
//! - `probe-fsync`: etcd's disk probe (the `fio` job of `../shared/bench`): sequential 2,300-byte
//!   writes to a file in `--probe-dir`, `fdatasync` after each; latency = write + sync. Like
//!   fio, it first lays the 22 MiB file out (written and synced), so a sync carries the data and
//!   no size or extent change (Picket's log preallocates its segments the same way); the writes
//!   wrap around at its end.
//! - `probe-tcp`: a 64-byte ping-pong over one loopback TCP connection (`TCP_NODELAY`, two
//!   blocking threads); latency = one round trip.
//! - `probe-commit`: the floor of a quorum commit, three processes (`commit/`).
//!
//! stdout: `probe <label> <per_s> <p50_ms> <p99_ms>`, the shape of the workload line.

use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::commit::Measured;
use crate::stats;
use crate::Args;

/// Bytes per write of the disk probe (etcd's WAL-entry-sized probe).
const FSYNC_WRITE_BYTES: usize = 2_300;
/// Bytes per message of the loopback probe.
const TCP_MESSAGE_BYTES: usize = 64;
/// The disk probe's file size (fio's `--size=22m`).
const FSYNC_FILE_BYTES: u64 = 22 * 1024 * 1024;
/// Round trips (or syncs) before the counted ones.
const WARMUP_ROUNDS: usize = 200;

/// Runs the probe `args.workload` names. Answers the exit status.
pub fn run(args: &Args) -> i32 {
    let budget = Duration::from_secs_f64(args.duration_s);
    let label = if args.label.is_empty() {
        args.workload.clone()
    } else {
        args.label.clone()
    };
    let measured = match args.workload.as_str() {
        "probe-fsync" => fsync(args, budget),
        "probe-tcp" => tcp(budget),
        "probe-commit" => crate::commit::run(args, &label),
        other => {
            eprintln!("picket-bench: unknown probe {other:?}");
            return 64;
        }
    };
    match measured {
        Ok((latencies, elapsed)) => {
            println!(
                "probe {label} {:.1} {:.4} {:.4}",
                latencies.len() as f64 / elapsed.as_secs_f64(),
                stats::percentile_ms(&latencies, 50.0),
                stats::percentile_ms(&latencies, 99.0)
            );
            0
        }
        Err(e) => {
            eprintln!("picket-bench: {}: {e}", args.workload);
            3
        }
    }
}

fn fsync(args: &Args, budget: Duration) -> std::io::Result<Measured> {
    let path = args
        .probe_dir
        .join(format!("fsync-probe-{}.dat", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&path)?;
        let chunk = vec![0u8; 1024 * 1024];
        for _ in 0..FSYNC_FILE_BYTES / chunk.len() as u64 {
            file.write_all(&chunk)?;
        }
        file.sync_all()?;
        file.seek(SeekFrom::Start(0))?;
        let block = vec![0x5a_u8; FSYNC_WRITE_BYTES];
        let mut at = 0u64;
        let mut once = || -> std::io::Result<Duration> {
            if at + FSYNC_WRITE_BYTES as u64 > FSYNC_FILE_BYTES {
                file.seek(SeekFrom::Start(0))?;
                at = 0;
            }
            let start = Instant::now();
            file.write_all(&block)?;
            at += FSYNC_WRITE_BYTES as u64;
            file.sync_data()?;
            Ok(start.elapsed())
        };
        for _ in 0..WARMUP_ROUNDS {
            once()?;
        }
        timed(budget, once)
    })();
    let _ = std::fs::remove_file(&path);
    result
}

fn tcp(budget: Duration) -> std::io::Result<Measured> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut buffer = [0u8; TCP_MESSAGE_BYTES];
        loop {
            if let Err(e) = stream.read_exact(&mut buffer) {
                // The prober closed the connection: done.
                return if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            stream.write_all(&buffer)?;
        }
    });
    let mut stream = TcpStream::connect(address)?;
    stream.set_nodelay(true)?;
    let mut buffer = [0u8; TCP_MESSAGE_BYTES];
    let mut once = || -> std::io::Result<Duration> {
        let start = Instant::now();
        stream.write_all(&buffer)?;
        stream.read_exact(&mut buffer)?;
        Ok(start.elapsed())
    };
    for _ in 0..WARMUP_ROUNDS {
        once()?;
    }
    let measured = timed(budget, once);
    drop(stream);
    echo.join()
        .map_err(|_| std::io::Error::other("the echo thread panicked"))??;
    measured
}

/// Runs `once` until `budget` has passed; answers the sorted latencies and the time taken.
fn timed(
    budget: Duration,
    mut once: impl FnMut() -> std::io::Result<Duration>,
) -> std::io::Result<Measured> {
    let start = Instant::now();
    let mut latencies = Vec::with_capacity(65_536);
    while start.elapsed() < budget {
        let took = once()?;
        latencies.push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
    }
    latencies.sort_unstable();
    Ok((latencies, start.elapsed()))
}
