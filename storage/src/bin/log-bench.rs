//! Benchmark of the log on the real disk (not a test): group commit and the recovery scan.
//!
//! ```text
//! cargo run --release -p picket-storage --bin log-bench            # ~1-2 minutes
//! cargo run --release -p picket-storage --bin log-bench -- --quick # seconds, small sizes
//! ```
//!
//! Environment: `LOG_BENCH_DIR` (default `target/log-bench`, which must be on a real disk, not a
//! tmpfs), `LOG_BENCH_SECS` (seconds per append case, default 5), `LOG_BENCH_RECOVERY_MIB`
//! (size of the log scanned by recovery, default 1024).
//!
//! Page cache: the cold figures drop the caches through `/proc/sys/vm/drop_caches` (needs root);
//! if that is refused, only warm figures are printed and the output says so.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use picket_storage::{Log, LogConfig, RealDisk};

const RECORD_LEN: usize = 256;

struct Settings {
    dir: PathBuf,
    secs: f64,
    recovery_mib: u64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn settings() -> Settings {
    let quick = std::env::args().any(|a| a == "--quick");
    let default_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/log-bench");
    Settings {
        dir: std::env::var_os("LOG_BENCH_DIR").map_or(default_dir, PathBuf::from),
        secs: env_or("LOG_BENCH_SECS", if quick { 1.0 } else { 5.0 }),
        recovery_mib: env_or("LOG_BENCH_RECOVERY_MIB", if quick { 64 } else { 1024 }),
    }
}

fn check(r: std::io::Result<()>, what: &str) {
    if let Err(e) = r {
        panic!("log-bench: {what}: {e}");
    }
}

/// Raw rate: write `len` bytes at the end of a file, fdatasync, repeat.
fn raw_fdatasync_rate(dir: &Path, secs: f64, len: usize) -> f64 {
    let path = dir.join("raw-fdatasync");
    let file = File::create(&path).expect("create raw file");
    let buf = vec![0xabu8; len];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        check(file.write_all_at(&buf, n * len as u64), "raw write");
        check(file.sync_data(), "raw fdatasync");
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    drop(file);
    check(fs::remove_file(&path), "remove raw file");
    rate
}

/// Appends batches of `batch` records of 256 bytes, one `sync` per batch. Returns
/// (records/s, fsyncs/s).
fn log_rate(dir: &Path, batch: usize, secs: f64) -> (f64, f64) {
    let log_dir = dir.join(format!("log-batch-{batch}"));
    let (mut log, _) = Log::open(RealDisk, &log_dir, LogConfig::default()).expect("open log");
    let records: Vec<Vec<u8>> = (0..batch).map(|i| vec![i as u8; RECORD_LEN]).collect();
    let start = Instant::now();
    let mut syncs = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        log.append(log.next_index(), &records).expect("append");
        log.sync().expect("sync");
        syncs += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(log);
    check(fs::remove_dir_all(&log_dir), "remove log dir");
    (
        syncs as f64 * batch as f64 / elapsed,
        syncs as f64 / elapsed,
    )
}

/// Raw fdatasync and the log at each batch size, measured in interleaved slices so that drift
/// in the disk's speed (other tenants, the host's cache) hits every case alike; medians reported.
fn group_commit(dir: &Path, secs: f64) {
    const BATCHES: [usize; 4] = [1, 16, 64, 1024];
    const ROUNDS: usize = 10;
    let slice = secs / ROUNDS as f64;
    println!(
        "\n== group commit: 256-byte records, one sync per batch, {secs}s per case in {ROUNDS} interleaved slices =="
    );
    let mut raw = Vec::new();
    let mut raw_batch = Vec::new();
    let mut logs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); BATCHES.len()];
    for _ in 0..ROUNDS {
        raw.push(raw_fdatasync_rate(dir, slice, RECORD_LEN));
        raw_batch.push(raw_fdatasync_rate(dir, slice, 64 * (RECORD_LEN + 8)));
        for (i, &batch) in BATCHES.iter().enumerate() {
            logs[i].push(log_rate(dir, batch, slice));
        }
    }
    let raw = median(raw);
    println!("raw write(256 B)+fdatasync:   {raw:>10.0} fsyncs/s (median of {ROUNDS})");
    println!(
        "raw write(16.5 KiB)+fdatasync: {:>8.0} fsyncs/s (the bytes of a 64-record batch)",
        median(raw_batch)
    );
    for (i, &batch) in BATCHES.iter().enumerate() {
        let records = median(logs[i].iter().map(|r| r.0).collect());
        let fsyncs = median(logs[i].iter().map(|r| r.1).collect());
        println!(
            "log batch {batch:>4}: {records:>10.0} records/s {fsyncs:>8.0} fsyncs/s ({:.0}% of raw 256 B fsync rate)",
            fsyncs / raw * 100.0
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn drop_caches() -> bool {
    // `sync` first so dirty pages can be dropped too.
    let synced = std::process::Command::new("sync")
        .status()
        .is_ok_and(|s| s.success());
    synced
        && OpenOptions::new()
            .write(true)
            .open("/proc/sys/vm/drop_caches")
            .and_then(|mut f| f.write_all(b"3\n"))
            .is_ok()
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("read log dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    files.sort();
    files
}

/// Sequential read of every segment file with 8 MiB reads. Returns MB/s.
fn sequential_read(dir: &Path, bytes: u64) -> f64 {
    let mut buf = vec![0u8; 8 << 20];
    let start = Instant::now();
    let mut total = 0u64;
    for path in segment_files(dir) {
        let mut f = File::open(&path).expect("open segment");
        loop {
            let n = f.read(&mut buf).expect("read segment");
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    assert_eq!(total, bytes, "read {total} bytes of {bytes}");
    total as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// Opening (recovering) the log. Returns MB/s and the records found.
fn recovery_scan(dir: &Path, bytes: u64) -> (f64, u64) {
    let start = Instant::now();
    let (log, report) = Log::open(RealDisk, dir, LogConfig::default()).expect("recover");
    let elapsed = start.elapsed().as_secs_f64();
    assert!(report.torn_tail.is_none(), "{report:?}");
    (bytes as f64 / elapsed / 1e6, log.last_index())
}

fn build_log(dir: &Path, mib: u64) -> (u64, u64) {
    let (mut log, _) = Log::open(RealDisk, dir, LogConfig::default()).expect("open log");
    let records: Vec<Vec<u8>> = (0..4096)
        .map(|i| (0..RECORD_LEN).map(|j| (i * 7 + j) as u8).collect())
        .collect();
    let target = mib << 20;
    let mut written = 0u64;
    while written < target {
        log.append(log.next_index(), &records).expect("append");
        log.sync().expect("sync");
        written += (records.len() * (RECORD_LEN + 8)) as u64;
    }
    let count = log.last_index();
    drop(log);
    let bytes = segment_files(dir)
        .iter()
        .map(|p| fs::metadata(p).expect("stat").len())
        .sum();
    (bytes, count)
}

fn print_environment(dir: &Path) {
    let out = std::process::Command::new("df")
        .arg("-T")
        .arg(dir)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|e| format!("df failed: {e}\n"));
    print!("directory {}\n{out}", dir.display());
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(str::to_owned)
        })
        .unwrap_or_default();
    println!(
        "{cpu}; {} cpus",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}

fn main() {
    let s = settings();
    fs::create_dir_all(&s.dir).expect("create bench dir");
    let dir = fs::canonicalize(&s.dir).expect("canonical bench dir");
    print_environment(&dir);
    let begin = Instant::now();

    group_commit(&dir, s.secs);

    println!("\n== recovery scan of a {} MiB log ==", s.recovery_mib);
    let log_dir = dir.join("recovery-log");
    if log_dir.exists() {
        check(fs::remove_dir_all(&log_dir), "remove old recovery log");
    }
    let (bytes, count) = build_log(&log_dir, s.recovery_mib);
    println!(
        "built {count} records, {bytes} bytes in {} segments",
        segment_files(&log_dir).len()
    );
    if drop_caches() {
        let read = sequential_read(&log_dir, bytes);
        assert!(drop_caches(), "drop_caches worked once, then failed");
        let (scan, found) = recovery_scan(&log_dir, bytes);
        assert_eq!(found, count);
        println!("cold (caches dropped): sequential read {read:>7.0} MB/s, recovery {scan:>7.0} MB/s ({:.0}%)", scan / read * 100.0);
    } else {
        println!("cold figures skipped: /proc/sys/vm/drop_caches not writable");
    }
    let read = sequential_read(&log_dir, bytes);
    let (scan, found) = recovery_scan(&log_dir, bytes);
    assert_eq!(found, count);
    println!("warm (page cache):     sequential read {read:>7.0} MB/s, recovery {scan:>7.0} MB/s ({:.0}%)", scan / read * 100.0);
    check(fs::remove_dir_all(&log_dir), "remove recovery log");
    println!(
        "\ntotal {:.0?}",
        Duration::from_secs_f64(begin.elapsed().as_secs_f64())
    );
}
