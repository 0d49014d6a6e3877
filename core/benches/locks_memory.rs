//! Memory of the lock state machine: 100,000 sessions holding 1,000,000 keys, measured as the
//! growth of the process's resident set (VmRSS in /proc/self/status; Linux only). A counting
//! global allocator would need `unsafe`, which the workspace forbids.
//!
//! `cargo bench -p picket-core --bench locks_memory`

// A bench binary may read /proc: the determinism rules are for the core library's code.
#![allow(clippy::disallowed_methods)]

use picket_core::locks::{
    Command, Identity, LockConfig, LockMode, LockStateMachine, Reply, RequestId, SessionProof,
};
use picket_core::time::Instant;

const SESSIONS: u64 = 100_000;
const HOLDS_PER_SESSION: u64 = 10;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .expect("VmRSS line");
    line.split_whitespace()
        .nth(1)
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS in kB")
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        // `cargo bench -- --list` / `cargo test --benches` probe: nothing to list.
        return;
    }
    let config = LockConfig {
        sessions_max: SESSIONS as usize,
        holds_per_session_max: HOLDS_PER_SESSION as usize,
        ..LockConfig::default()
    };
    let before = rss_kib();
    let mut sm = LockStateMachine::new(config);
    let mut sessions = Vec::with_capacity(SESSIONS as usize);
    for i in 0..SESSIONS {
        let identity = Identity {
            name: format!("billing-worker-{i}"),
            host: format!("node-{:04}.dc1.example", i % 1_000),
            pid: 10_000 + i as u32,
            principal: format!("spiffe://prod/ns/billing/sa/worker-{}", i % 100),
        };
        match sm.apply(
            Instant::from_millis(1),
            Command::CreateSession {
                secret_hash: None,
                ttl_ms: None,
                identity,
            },
        ) {
            Ok(Reply::SessionCreated { session, .. }) => sessions.push(session),
            other => panic!("{other:?}"),
        }
    }
    let after_sessions = rss_kib();
    for h in 0..HOLDS_PER_SESSION {
        for (i, session) in sessions.iter().enumerate() {
            let command = Command::Acquire {
                session: *session,
                proof: SessionProof::legacy(),
                request: RequestId(h + 1),
                namespace: "orders".into(),
                key: format!("invoice/{i:06}-{h}"),
                mode: LockMode::Exclusive,
                wait: None,
            };
            sm.apply(Instant::from_millis(2), command).expect("acquire");
        }
    }
    drop(sessions);
    let after_holds = rss_kib();
    let holds = SESSIONS * HOLDS_PER_SESSION;
    let total_mib = (after_holds - before) as f64 / 1024.0;
    println!("sessions: {SESSIONS}, holds: {holds} (keys like `invoice/000042-7`)");
    println!(
        "rss growth: sessions {:.1} MiB ({:.0} B/session), holds {:.1} MiB ({:.0} B/hold), total {:.1} MiB",
        (after_sessions - before) as f64 / 1024.0,
        (after_sessions - before) as f64 * 1024.0 / SESSIONS as f64,
        (after_holds - after_sessions) as f64 / 1024.0,
        (after_holds - after_sessions) as f64 * 1024.0 / holds as f64,
        total_mib
    );
    println!(
        "(includes the retained watch history: {} events, and {} remembered replies per session)",
        sm.config().watch_retention,
        HOLDS_PER_SESSION.min(sm.config().dedup_window as u64)
    );
    assert_eq!(sm.longest_holds(Instant::ZERO).len(), 1);
}
