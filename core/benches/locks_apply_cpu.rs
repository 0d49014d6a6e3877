//! Apply rate measured in CPU time of this process (utime + stime from /proc/self/stat), next to
//! wall time: on a shared machine, wall-clock benchmarks (criterion's `locks_apply`) measure the
//! other tenants too. Linux only.
//!
//! `cargo bench -p picket-core --bench locks_apply_cpu`
//!
//! Workload: 10,000 sessions holding 100,000 background keys; then 2,000,000 commands:
//! acquire/release pairs on distinct keys, each session in turn.

// A bench binary may read /proc and the wall clock: the determinism rules are for the library.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use picket_core::locks::{
    Command, Identity, LockConfig, LockMode, LockStateMachine, Reply, RequestId, SessionId,
    SessionProof, Token,
};
use picket_core::time::Instant;

const SESSIONS: u64 = 10_000;
const BACKGROUND_HOLDS_PER_SESSION: u64 = 10;
const PAIRS: u64 = 1_000_000;
const CHUNK: u64 = 50_000;

/// CPU seconds (user + system) this process used so far.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("Linux /proc");
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0 // USER_HZ is 100 on Linux
}

fn acquire(session: SessionId, request: u64, key: String) -> Command {
    Command::Acquire {
        session,
        proof: SessionProof::legacy(),
        request: RequestId(request),
        namespace: "orders".into(),
        key,
        mode: LockMode::Exclusive,
        wait: None,
    }
}

fn main() {
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let config = LockConfig {
        holds_per_session_max: 100,
        ..LockConfig::default()
    };
    let mut sm = LockStateMachine::new(config);
    let mut sessions = Vec::new();
    for i in 0..SESSIONS {
        let identity = Identity {
            name: format!("svc-{i}"),
            host: format!("host-{}", i % 100),
            pid: i as u32,
            principal: format!("spiffe://cluster/svc-{}", i % 50),
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
    for h in 0..BACKGROUND_HOLDS_PER_SESSION {
        for (i, session) in sessions.iter().enumerate() {
            let key = format!("background/{i:06}/{h}");
            sm.apply(Instant::from_millis(2), acquire(*session, h + 1, key))
                .expect("background acquire");
        }
    }
    // Commands are built outside the measured time, a chunk at a time.
    let mut cpu = 0.0;
    let mut wall = 0.0;
    let mut request = 1_000;
    for chunk in 0..PAIRS / CHUNK {
        let mut revision = sm.revision().0;
        let mut commands = Vec::with_capacity(2 * CHUNK as usize);
        for i in 0..CHUNK {
            let n = chunk * CHUNK + i;
            let session = sessions[(n % SESSIONS) as usize];
            request += 2;
            let key = format!("hot/{n:08}");
            revision += 1;
            commands.push(acquire(session, request, key.clone()));
            revision += 1;
            commands.push(Command::Release {
                session,
                proof: SessionProof::legacy(),
                request: RequestId(request + 1),
                namespace: "orders".into(),
                key,
                token: Token(revision - 1),
            });
        }
        let (cpu_start, wall_start) = (cpu_seconds(), std::time::Instant::now());
        let outcomes = sm.apply_batch(Instant::from_millis(3), commands);
        wall += wall_start.elapsed().as_secs_f64();
        cpu += cpu_seconds() - cpu_start;
        assert!(outcomes.iter().all(Result::is_ok));
    }
    let commands = 2 * PAIRS;
    println!("{commands} acquire/release commands over 100,000 held keys and 10,000 sessions");
    println!(
        "cpu time {cpu:.2} s -> {:.0} commands/s per core; wall time {wall:.2} s -> {:.0} commands/s",
        commands as f64 / cpu,
        commands as f64 / wall
    );
}
