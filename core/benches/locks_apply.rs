//! Apply rate of the lock state machine: acquire/release commands per second on one core.
//!
//! `cargo bench -p picket-core --bench locks_apply`
//!
//! Two workloads over a state that already holds 100,000 keys in 10,000 sessions (so the maps
//! have realistic depth): uncontended acquire/release pairs on distinct keys, and a hand-off
//! chain where every release grants the next waiter in the same revision.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use picket_core::locks::{
    Command, Identity, LockConfig, LockMode, LockStateMachine, Reply, RequestId, SessionId,
    SessionProof, Token, Wait,
};
use picket_core::time::Instant;

const SESSIONS: u64 = 10_000;
const BACKGROUND_HOLDS_PER_SESSION: u64 = 10;
const PAIRS: u64 = 50_000;

fn identity(i: u64) -> Identity {
    Identity {
        name: format!("svc-{i}"),
        host: format!("host-{}", i % 100),
        pid: i as u32,
        principal: format!("spiffe://cluster/svc-{}", i % 50),
    }
}

fn acquire(session: SessionId, request: u64, key: String, wait: bool) -> Command {
    Command::Acquire {
        session,
        proof: SessionProof::legacy(),
        request: RequestId(request),
        namespace: "orders".into(),
        key,
        mode: LockMode::Exclusive,
        wait: wait.then_some(Wait::UNBOUNDED),
    }
}

/// 10,000 sessions holding 100,000 keys; returns the state and its sessions.
fn background() -> (LockStateMachine, Vec<SessionId>) {
    let config = LockConfig {
        holds_per_session_max: 100,
        ..LockConfig::default()
    };
    let mut sm = LockStateMachine::new(config);
    let mut sessions = Vec::new();
    for i in 0..SESSIONS {
        let command = Command::CreateSession {
            secret_hash: None,
            ttl_ms: None,
            identity: identity(i),
        };
        match sm.apply(Instant::from_millis(1), command) {
            Ok(Reply::SessionCreated { session, .. }) => sessions.push(session),
            other => panic!("{other:?}"),
        }
    }
    let mut request = 0;
    for h in 0..BACKGROUND_HOLDS_PER_SESSION {
        request += 1;
        for (i, session) in sessions.iter().enumerate() {
            let key = format!("background/{i:06}/{h}");
            sm.apply(
                Instant::from_millis(2),
                acquire(*session, request, key, false),
            )
            .expect("background acquire");
        }
    }
    (sm, sessions)
}

/// Acquire/release pairs on distinct keys; tokens predicted from the revision.
fn uncontended(sm: &LockStateMachine, sessions: &[SessionId]) -> Vec<Command> {
    let mut revision = sm.revision().0;
    let mut commands = Vec::with_capacity(2 * PAIRS as usize);
    for i in 0..PAIRS {
        let session = sessions[(i % SESSIONS) as usize];
        let request = 1_000 + 2 * i;
        let key = format!("hot/{i:08}");
        revision += 1;
        commands.push(acquire(session, request, key.clone(), false));
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
    commands
}

/// One key: every session queues on it, then each holder releases and hands it to the next.
fn handoff(sm: &LockStateMachine, sessions: &[SessionId]) -> Vec<Command> {
    const CHAIN: usize = 1_000;
    let base = sm.revision().0;
    let mut commands = Vec::new();
    for session in sessions.iter().take(CHAIN) {
        commands.push(acquire(*session, 1_000, "chain".into(), true));
    }
    // The first acquire was granted at base + 1; release i is applied at base + CHAIN + i + 1 and
    // grants the next waiter at that revision.
    for (i, session) in sessions.iter().take(CHAIN).enumerate() {
        let token = if i == 0 {
            base + 1
        } else {
            base + CHAIN as u64 + i as u64
        };
        commands.push(Command::Release {
            session: *session,
            proof: SessionProof::legacy(),
            request: RequestId(1_001),
            namespace: "orders".into(),
            key: "chain".into(),
            token: Token(token),
        });
    }
    commands
}

fn run(sm: &mut LockStateMachine, commands: Vec<Command>) {
    for outcome in sm.apply_batch(Instant::from_millis(3), commands) {
        assert!(outcome.is_ok(), "{outcome:?}");
    }
}

fn bench(c: &mut Criterion) {
    let (sm, sessions) = background();
    let mut group = c.benchmark_group("locks_apply");
    group.sample_size(10);
    group.throughput(Throughput::Elements(2 * PAIRS));
    group.bench_function("acquire_release_uncontended", |b| {
        b.iter_batched(
            || (sm.clone(), uncontended(&sm, &sessions)),
            |(mut sm, commands)| {
                run(&mut sm, commands);
                sm
            },
            BatchSize::PerIteration,
        )
    });
    group.throughput(Throughput::Elements(2_000));
    group.bench_function("acquire_wait_release_handoff", |b| {
        b.iter_batched(
            || (sm.clone(), handoff(&sm, &sessions)),
            |(mut sm, commands)| {
                run(&mut sm, commands);
                sm
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
