//! What a local compaction costs inside the driver's turn, for the state of `scripts/bench`'s
//! `lock-1000key-c64` (64 sessions taking and releasing 1,000 keys, the full watch history):
//! `LockStateMachine::snapshot` (which stays in the turn), a clone of the snapshot value (what
//! the replica's catch-up copy cost before it was shared, issue 17; since the watch history is
//! kept in shared chunks, a clone copies no event) and sharing it.
//!
//! `cargo bench -p picket-core --bench compaction_snapshot`

// A bench binary may read the clock: the determinism rules are for the core library's code.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::sync::Arc;
use std::time::Instant as WallClock;

use picket_core::locks::{
    AcquireReply, Command, Identity, LockConfig, LockMode, LockStateMachine, Reply, RequestId,
    SessionProof,
};
use picket_core::time::Instant;

const SESSIONS: u64 = 64;
const KEYS: u64 = 1_000;
const ROUNDS: usize = 9;

fn state() -> LockStateMachine {
    let mut sm = LockStateMachine::new(LockConfig::default());
    let mut sessions = Vec::new();
    for i in 0..SESSIONS {
        let identity = Identity {
            name: format!("bench-worker-{i}"),
            host: "bench-host.dc1.example".into(),
            pid: 10_000 + i as u32,
            principal: format!("spiffe://bench/worker-{i}"),
        };
        let command = Command::CreateSession {
            secret_hash: None,
            ttl_ms: None,
            identity,
        };
        match sm.apply(Instant::from_millis(1), command) {
            Ok(Reply::SessionCreated { session, .. }) => sessions.push(session),
            other => panic!("{other:?}"),
        }
    }
    // Enough acquire/release pairs to fill the watch history (two events each).
    let pairs = sm.config().watch_retention as u64;
    for n in 0..pairs {
        let session = sessions[(n % SESSIONS) as usize];
        let key = format!("key-{}", n % KEYS);
        let request = RequestId(2 * n + 1);
        let at = Instant::from_millis(2 + n / 10);
        let acquire = Command::Acquire {
            session,
            proof: SessionProof::legacy(),
            request,
            namespace: "bench".into(),
            key: key.clone(),
            mode: LockMode::Exclusive,
            wait: None,
        };
        if let Ok(Reply::Acquire(AcquireReply::Granted { token, .. })) = sm.apply(at, acquire) {
            let release = Command::Release {
                session,
                proof: SessionProof::legacy(),
                request: RequestId(2 * n + 2),
                namespace: "bench".into(),
                key,
                token,
            };
            sm.apply(at, release).expect("release");
        }
    }
    sm
}

/// The median of `ROUNDS` timings of `f`, in milliseconds.
fn median_ms(mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let started = WallClock::now();
            f();
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[ROUNDS / 2]
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        // `cargo bench -- --list` / `cargo test --benches` probe: nothing to list.
        return;
    }
    let sm = state();
    let snapshot = sm.snapshot();
    println!(
        "state: {SESSIONS} sessions, {KEYS} keys, {} watch events, {} audit records",
        snapshot.events.len(),
        snapshot.audit.len()
    );
    let take = median_ms(|| drop(std::hint::black_box(sm.snapshot())));
    let copy = median_ms(|| drop(std::hint::black_box(snapshot.clone())));
    let shared = Arc::new(snapshot);
    let share = median_ms(|| drop(std::hint::black_box(Arc::clone(&shared))));
    println!("LockStateMachine::snapshot (in the turn): {take:.2} ms (median of {ROUNDS})");
    println!("a clone of the value (the catch-up copy before issue 17): {copy:.2} ms");
    println!("sharing it (NodeSnapshot, today): {share:.4} ms");
}
