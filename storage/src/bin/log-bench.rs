//! Benchmark of the log on the real disk (not a test): group commit and the recovery scan.
//!
//! ```text
//! cargo run --release -p picket-storage --bin log-bench            # ~1-2 minutes
//! cargo run --release -p picket-storage --bin log-bench -- --quick # seconds, small sizes
//! cargo run --release -p picket-storage --bin log-bench -- --write-modes # the write_mode A/B only
//! LOG_BENCH_MODE=dsync target/release/log-bench --one-mode # one mode alone (for strace -c)
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

use picket_storage::{Log, LogConfig, RealDisk, WriteMode};

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

/// The raw disk: write `len` bytes at the end of a file, fdatasync, repeat.
struct RawWriter {
    file: File,
    buf: Vec<u8>,
    written: u64,
    /// Write from offset 0 again instead of growing the file past this.
    wrap_at: Option<u64>,
}

impl RawWriter {
    fn new(dir: &Path, name: &str, len: usize) -> RawWriter {
        let file = File::create(dir.join(name)).expect("create raw file");
        RawWriter {
            file,
            buf: vec![0xab; len],
            written: 0,
            wrap_at: None,
        }
    }

    /// One write and one fdatasync; returns the seconds it took.
    fn step(&mut self) -> f64 {
        if self
            .wrap_at
            .is_some_and(|w| self.written + self.buf.len() as u64 > w)
        {
            self.written = 0;
        }
        let start = Instant::now();
        check(self.file.write_all_at(&self.buf, self.written), "raw write");
        check(self.file.sync_data(), "raw fdatasync");
        self.written += self.buf.len() as u64;
        start.elapsed().as_secs_f64()
    }
}

/// The log: append `batch` records of 256 bytes, sync, repeat.
struct LogWriter {
    log: Log<RealDisk>,
    records: Vec<Vec<u8>>,
}

impl LogWriter {
    fn new(dir: &Path, batch: usize) -> LogWriter {
        let (log, _) = Log::open(RealDisk, dir, LogConfig::default()).expect("open log");
        let records = (0..batch).map(|i| vec![i as u8; RECORD_LEN]).collect();
        LogWriter { log, records }
    }

    /// One append of the batch and one sync; returns the seconds it took.
    fn step(&mut self) -> f64 {
        let start = Instant::now();
        self.log
            .append(self.log.next_index(), &self.records)
            .expect("append");
        self.log.sync().expect("sync");
        start.elapsed().as_secs_f64()
    }
}

/// Runs `a` and `b` alternately, one operation each, for `secs` in total, and returns each
/// one's operations per second of its own time. Interleaving per operation makes both see the
/// same disk: this one's fsync rate swings by 10x within seconds when other tenants write.
fn paired(secs: f64, mut a: impl FnMut() -> f64, mut b: impl FnMut() -> f64) -> (f64, f64) {
    let (mut time_a, mut time_b, mut n) = (0.0, 0.0, 0u64);
    while time_a + time_b < secs {
        time_a += a();
        time_b += b();
        n += 1;
    }
    (n as f64 / time_a, n as f64 / time_b)
}

fn group_commit(dir: &Path, secs: f64) {
    println!(
        "\n== group commit: 256-byte records, one sync per batch, each case interleaved op by op \
         with the raw 256 B write+fdatasync loop, {secs}s per case =="
    );
    let mut raw = RawWriter::new(dir, "raw-fdatasync", RECORD_LEN);
    // Context: the bytes of one 64-record batch, appended (the file grows by blocks) and
    // overwriting a pre-zeroed file (no growth, no block allocation).
    let batch_bytes = 64 * (RECORD_LEN + 8);
    let mut append_batch = RawWriter::new(dir, "raw-append-batch", batch_bytes);
    let (base, appended) = paired(secs / 2.0, || raw.step(), || append_batch.step());
    let mut overwrite_batch = RawWriter::new(dir, "raw-overwrite-batch", batch_bytes);
    let zeros = vec![0u8; 64 << 20];
    check(overwrite_batch.file.write_all_at(&zeros, 0), "pre-zero");
    check(overwrite_batch.file.sync_all(), "fsync pre-zeroed file");
    overwrite_batch.wrap_at = Some(zeros.len() as u64);
    let (base2, overwritten) = paired(secs / 2.0, || raw.step(), || overwrite_batch.step());
    println!(
        "raw 16.5 KiB (the bytes of a 64-record batch) + fdatasync: appended {appended:.0}/s \
         ({:.0}% of raw 256 B), overwriting a pre-zeroed file {overwritten:.0}/s ({:.0}%)",
        appended / base * 100.0,
        overwritten / base2 * 100.0
    );
    for batch in [1usize, 16, 64, 1024] {
        let log_dir = dir.join(format!("log-batch-{batch}"));
        let mut log = LogWriter::new(&log_dir, batch);
        let (raw_rate, log_rate) = paired(secs, || raw.step(), || log.step());
        println!(
            "log batch {batch:>4}: {:>10.0} records/s {log_rate:>7.0} fsyncs/s | raw 256 B \
             {raw_rate:>6.0} fsyncs/s | log/raw {:>4.0}%",
            log_rate * batch as f64,
            log_rate / raw_rate * 100.0
        );
        drop(log);
        check(fs::remove_dir_all(&log_dir), "remove log dir");
    }
    for name in ["raw-fdatasync", "raw-append-batch", "raw-overwrite-batch"] {
        check(fs::remove_file(dir.join(name)), "remove raw file");
    }
}

/// `append_sync` of `batch` records in one write mode: one group commit per step.
struct CommitWriter {
    log: Log<RealDisk>,
    records: Vec<Vec<u8>>,
}

impl CommitWriter {
    fn new(dir: &Path, batch: usize, len: usize, write_mode: WriteMode) -> CommitWriter {
        let config = LogConfig {
            write_mode,
            ..LogConfig::default()
        };
        let (log, _) = Log::open(RealDisk, dir, config).expect("open log");
        let records = (0..batch).map(|i| vec![i as u8; len]).collect();
        CommitWriter { log, records }
    }

    fn step(&mut self) -> f64 {
        let start = Instant::now();
        self.log
            .append_sync(self.log.next_index(), &self.records)
            .expect("append_sync");
        start.elapsed().as_secs_f64()
    }
}

const MODES: [(WriteMode, &str); 3] = [
    (WriteMode::Separate, "separate"),
    (WriteMode::Fdatasync, "fdatasync"),
    (WriteMode::Dsync, "dsync"),
];

/// The three write modes of `append_sync`, interleaved group commit by group commit (so all see
/// the same disk), for batches of 1 and 16 records of 256 B and 1 of 2,300 B.
fn write_modes(dir: &Path, secs: f64) {
    println!(
        "
== append_sync by write_mode, interleaved op by op, {secs}s per case =="
    );
    for (batch, len) in [(1usize, RECORD_LEN), (16, RECORD_LEN), (1, 2300)] {
        let mut writers: Vec<(CommitWriter, PathBuf, f64, Vec<f64>)> = MODES
            .iter()
            .map(|(mode, name)| {
                let d = dir.join(format!("modes-{name}"));
                if d.exists() {
                    check(fs::remove_dir_all(&d), "remove old log");
                }
                (CommitWriter::new(&d, batch, len, *mode), d, 0.0, Vec::new())
            })
            .collect();
        let mut total = 0.0;
        while total < secs {
            for (w, _, time, lat) in &mut writers {
                let t = w.step();
                *time += t;
                total += t;
                lat.push(t);
            }
        }
        let mut line = format!("batch {batch:>2} x {len:>4} B:");
        for ((_, name), (_, d, time, lat)) in MODES.iter().zip(&mut writers) {
            lat.sort_by(f64::total_cmp);
            let p50 = lat[lat.len() / 2] * 1e3;
            line += &format!(
                " | {name} {:.0}/s p50 {p50:.3} ms",
                lat.len() as f64 / *time
            );
            check(fs::remove_dir_all(d), "remove log dir");
        }
        println!("{line}");
    }
}

/// One write mode alone (`LOG_BENCH_MODE`), `LOG_BENCH_OPS` group commits of one 256 B record:
/// what `strace -c` counts per group commit.
fn one_mode(dir: &Path) {
    let name = std::env::var("LOG_BENCH_MODE").unwrap_or_else(|_| "fdatasync".into());
    let (mode, _) = *MODES
        .iter()
        .find(|(_, n)| *n == name)
        .expect("LOG_BENCH_MODE: separate, fdatasync or dsync");
    let ops: u64 = env_or("LOG_BENCH_OPS", 10_000);
    let d = dir.join(format!("one-{name}"));
    if d.exists() {
        check(fs::remove_dir_all(&d), "remove old log");
    }
    let mut w = CommitWriter::new(&d, 1, RECORD_LEN, mode);
    let start = Instant::now();
    for _ in 0..ops {
        w.step();
    }
    let took = start.elapsed().as_secs_f64();
    println!("{name}: {ops} group commits, {:.0}/s", ops as f64 / took);
    check(fs::remove_dir_all(&d), "remove log dir");
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
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

/// Sequential read of every segment file in 64 MiB reads (recovery reads each segment whole, so
/// this is the same IO pattern without the checking). Returns MB/s.
fn sequential_read(dir: &Path, bytes: u64) -> f64 {
    let mut buf = vec![0u8; 64 << 20];
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

    if std::env::args().any(|a| a == "--one-mode") {
        one_mode(&dir);
        return;
    }
    write_modes(&dir, s.secs);
    if std::env::args().any(|a| a == "--write-modes") {
        return;
    }
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
        // Two rounds in opposite orders, caches dropped before every pass.
        let (mut reads, mut scans) = (Vec::new(), Vec::new());
        for round in 0..2 {
            for pass in 0..2 {
                assert!(drop_caches(), "drop_caches worked once, then failed");
                if (round + pass) % 2 == 0 {
                    reads.push(sequential_read(&log_dir, bytes));
                } else {
                    let (scan, found) = recovery_scan(&log_dir, bytes);
                    assert_eq!(found, count);
                    scans.push(scan);
                }
            }
        }
        let (read, scan) = (mean(&reads), mean(&scans));
        println!(
            "cold (caches dropped): sequential read {read:>7.0} MB/s, recovery {scan:>7.0} MB/s \
             ({:.0}%)   [reads {reads:.0?}, recoveries {scans:.0?}]",
            scan / read * 100.0
        );
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
