//! Model test with failing fsyncs: an operation that fails poisons the log; after a restart
//! (with or without a crash) the log is still a contiguous run of what was written, it still
//! holds every record that was durable before the failed operation (less what a failed truncation
//! or compaction was asked to remove), and it starts no later than a failed compaction allowed.

mod common;

use std::path::Path;

use picket_storage::{CrashMode, Error, Log, LogConfig, SimDisk};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<usize>),
    Sync,
    /// Truncate keeping this per mille of the records.
    Truncate(u32),
    /// Drop below this per mille of the records.
    DropBelow(u32),
    /// Reset to `next_index() + n`.
    Reset(u64),
    /// The next `n` fsyncs (file or directory) fail.
    FailSyncs(u32),
    /// Restart: crash (torn or not) or a clean process restart.
    Restart(Option<bool>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => prop::collection::vec(0usize..120, 0..8).prop_map(Op::Append),
        3 => Just(Op::Sync),
        1 => (0u32..=1000).prop_map(Op::Truncate),
        1 => (0u32..=1000).prop_map(Op::DropBelow),
        1 => (0u64..5).prop_map(Op::Reset),
        2 => (1u32..3).prop_map(Op::FailSyncs),
        1 => any::<Option<bool>>().prop_map(Op::Restart),
    ]
}

proptest! {
    // Cheap, and its bugs hide in rare interleavings of faults: run 8x the configured cases.
    #![proptest_config(ProptestConfig::with_cases(common::cases_times(8)))]

    #[test]
    fn failed_fsyncs_never_lose_durable_records(
        seed in any::<u64>(),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        run(seed, ops)?;
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_size_bytes: 400,
        record_size_max: 256,
        ..LogConfig::default()
    }
}

fn read_all(log: &Log<SimDisk>) -> Vec<Vec<u8>> {
    log.read(log.first_index()..log.next_index(), u64::MAX)
        .expect("read whole log")
}

struct Model {
    first: u64,
    records: Vec<Vec<u8>>,
}

/// What a restart after the last operation may find.
struct Expect {
    /// The log may start anywhere in `[model.first, first_max]`.
    first_max: u64,
    /// The log must reach at least this index (records durable and not asked to be removed).
    last_min: u64,
    /// A failed reset may also leave an empty log at one of these next indexes.
    empty_at: Vec<u64>,
}

fn restart(disk: &SimDisk, crash: Option<bool>) -> Log<SimDisk> {
    disk.fail_next_syncs(0);
    match crash {
        Some(true) => disk.crash_with(CrashMode::TornPrefix),
        Some(false) => disk.crash_with(CrashMode::DropUnsynced),
        None => {}
    }
    Log::open(disk.clone(), Path::new("/n/log"), config())
        .expect("recovery after faults")
        .0
}

fn check_recovered(log: &Log<SimDisk>, m: &mut Model, e: &Expect) -> Result<(), TestCaseError> {
    let got = read_all(log);
    let first = log.first_index();
    if got.is_empty() && e.empty_at.contains(&log.next_index()) {
        *m = Model {
            first,
            records: got,
        };
        return Ok(());
    }
    prop_assert!(
        first >= m.first && first <= e.first_max,
        "first index {} outside [{}, {}]",
        first,
        m.first,
        e.first_max
    );
    let skip = (first - m.first) as usize;
    prop_assert!(
        skip + got.len() <= m.records.len(),
        "records appeared from nowhere"
    );
    prop_assert!(
        got[..] == m.records[skip..skip + got.len()],
        "recovered log is not a run of the written records"
    );
    prop_assert!(
        log.next_index() > e.last_min,
        "durable record {} lost (log ends at {})",
        e.last_min,
        log.last_index()
    );
    *m = Model {
        first,
        records: got,
    };
    Ok(())
}

fn run(seed: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let disk = SimDisk::new(seed);
    let mut log = restart(&disk, None);
    let mut m = Model {
        first: 1,
        records: Vec::new(),
    };
    let mut serial = 0u64;
    for op in ops {
        let durable = log.synced_index();
        let mut e = Expect {
            first_max: m.first,
            last_min: durable,
            empty_at: Vec::new(),
        };
        let len = m.records.len() as u64;
        let result = match &op {
            Op::Append(lens) => {
                let batch: Vec<Vec<u8>> = lens
                    .iter()
                    .map(|&l| {
                        serial += 1;
                        let mut p = serial.to_le_bytes().to_vec();
                        p.resize(8 + l, serial as u8);
                        p
                    })
                    .collect();
                let r = log.append(log.next_index(), &batch);
                m.records.extend(batch);
                r
            }
            Op::Sync => log.sync(),
            Op::Truncate(permille) => {
                let keep = len * u64::from(*permille) / 1000;
                let after = m.first + keep - 1;
                e.last_min = e.last_min.min(after);
                let r = log.truncate_suffix(after);
                if r.is_ok() {
                    m.records.truncate(keep as usize);
                }
                r
            }
            Op::DropBelow(permille) => {
                let below = m.first + len * u64::from(*permille) / 1000;
                e.first_max = below.max(m.first);
                let r = log.drop_below(below).map(|_| ());
                if r.is_ok() {
                    let gone = (log.first_index() - m.first) as usize;
                    m.records.drain(..gone);
                    m.first = log.first_index();
                }
                r
            }
            Op::Reset(n) => {
                let next = log.next_index() + n;
                e.last_min = 0;
                e.empty_at = vec![1, next];
                let r = log.reset(next);
                if r.is_ok() {
                    m.first = next;
                    m.records.clear();
                }
                r
            }
            Op::FailSyncs(n) => {
                disk.fail_next_syncs(*n);
                Ok(())
            }
            Op::Restart(crash) => {
                drop(log);
                log = restart(&disk, *crash);
                check_recovered(&log, &mut m, &e)?;
                Ok(())
            }
        };
        match result {
            Ok(()) => {
                prop_assert_eq!(log.first_index(), m.first);
                prop_assert!(
                    read_all(&log) == m.records,
                    "log differs from the model after {:?}",
                    op
                );
            }
            Err(err) => {
                prop_assert!(
                    matches!(err, Error::Io { .. } | Error::Poisoned),
                    "unexpected error {}",
                    err
                );
                prop_assert!(
                    matches!(log.sync(), Err(Error::Poisoned)),
                    "failed log not poisoned"
                );
                drop(log);
                log = restart(&disk, Some(seed.is_multiple_of(2)));
                check_recovered(&log, &mut m, &e)?;
            }
        }
    }
    Ok(())
}
