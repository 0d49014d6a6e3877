//! The clients' workload on the real client library (docs/simulation.md, "A run"): every draw
//! from the simulation's seeded RNG, so a seed replays it. Each session repeats one acquire of
//! `sim/k0..k2` (exclusive or shared on the same keys) or of a permit of the run's semaphores
//! `sim/s0..` ([`draw_semaphores`]) — `try_lock`, a waiting call awaited (`lock_within` with a
//! short or long deadline, or `lock`), one dropped after a random delay (the library cancels
//! it), or one cancelled explicitly with `cancel_wait` while it waits — records what it saw, and
//! uses a grant: an exclusive holder writes to the fenced resource with its token, a permit
//! holder writes in its slot (`check_slot`), a shared holder reads through `check_read`.

use std::time::Duration;

use madsim::rand::{thread_rng, Rng};
use picket_client::{Client, ClientError, LockGuard, Session};
use picket_core::locks::Token;
use picket_proto::proto;

use super::real::{ClientCtx, KEYS, NAMESPACE};
use super::resource::{read_as, write_as, ResourceConn};
use super::shared::{lock, Break};
use crate::history::{
    AckedOp, Ask, Asked, Attempt, CancelSeen, Fnv, GrantAcked, Mode, Outcome, ReadSeen,
};

/// The longest a waiting call is polled after its explicit cancel was answered.
const AFTER_CANCEL_MS: u64 = 2_000;

/// Acquires in a row without a grant after which a session is dropped for a new one.
const FAILURES_MAX: u32 = 5;

/// The semaphores of a run with `seed`: one or two (`s0`, `s1`), each of 2 or 3 permits. Drawn
/// from a hash of the seed, not the simulation's RNG, so the draw moves no other draw of the
/// run.
pub fn draw_semaphores(seed: u64) -> Vec<(String, u32)> {
    let h = Fnv::of(&(seed ^ 0x5e3a_9f0c_0000_0001).to_le_bytes());
    let count = 1 + (h % 2);
    (0..count)
        .map(|i| (format!("s{i}"), 2 + u32::from((h >> (8 + 8 * i)) & 1 == 1)))
        .collect()
}

/// A session's workload: acquires drawn by [`draw_acquire`], each recorded (`Attempt`) with
/// what the client saw; a grant used by [`use_grant`] and released; a cancel answered with a
/// hold it raced, released at once.
pub async fn run_session(ctx: &ClientCtx, session: &Session, resource: &mut Option<ResourceConn>) {
    let semaphores: Vec<String> = lock(&ctx.shared)
        .semaphores
        .iter()
        .map(|(key, _)| key.clone())
        .collect();
    let deadlines = draw_deadlines(KEYS + semaphores.len());
    let mut failures = 0;
    while !lock(&ctx.shared).clients_stop && session.is_alive() && failures < FAILURES_MAX {
        let draw = draw_acquire(&deadlines, &semaphores);
        let (guard, outcome, cancel) = acquire(ctx, session, &draw).await;
        record_attempt(ctx, session, &draw, outcome, cancel);
        let Some(guard) = guard else {
            if let Some(token) = cancel.and_then(|c| c.held_token) {
                give_back(ctx, session, &draw, token).await;
            }
            failures += 1;
            let pause = thread_rng().gen_range(50..200);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            continue;
        };
        failures = 0;
        use_grant(ctx, &draw, guard, resource).await;
    }
}

/// The server-side wait deadline a session uses on each key, drawn when it opens (so that
/// every wait of a session on a key has the same one, the evidence checker 7 needs): a short
/// one, a long one (beyond a session TTL), or none (`lock`, dropped or cancelled by the client).
fn draw_deadlines(keys: usize) -> Vec<Option<u64>> {
    (0..keys)
        .map(|_| match thread_rng().gen_range(0..3) {
            0 => Some(thread_rng().gen_range(50..400)),
            1 => Some(thread_rng().gen_range(1_500..5_000)),
            _ => None,
        })
        .collect()
}

/// One acquire of the workload.
struct Draw {
    key: String,
    /// `namespace/key`, as the gate and the history name it.
    gate_key: String,
    mode: Asked,
    ask: Ask,
    timeout_ms: Option<u64>,
}

/// Draws an acquire: the key (a lock's or a semaphore's, each alike), the mode (a permit on a
/// semaphore; on a lock shared in 2 of 5, on every key, so readers and writers contend on the
/// same keys) and how to ask (a try in 4 of 10, a waiting call awaited, dropped or cancelled in
/// 2 of 10 each).
fn draw_acquire(deadlines: &[Option<u64>], semaphores: &[String]) -> Draw {
    let mut rng = thread_rng();
    let index = rng.gen_range(0..KEYS + semaphores.len());
    let (key, mode) = if index >= KEYS {
        (semaphores[index - KEYS].clone(), Asked::Permit)
    } else if rng.gen_range(0..5) < 2 {
        (format!("k{index}"), Asked::Shared)
    } else {
        (format!("k{index}"), Asked::Exclusive)
    };
    let ask = match rng.gen_range(0..10) {
        0..=3 => Ask::Try,
        4..=5 => Ask::Wait {
            ms: rng.gen_range(1_000..4_000),
        },
        6..=7 => Ask::DropAfter {
            ms: rng.gen_range(20..600),
        },
        _ => Ask::CancelAfter {
            ms: rng.gen_range(20..600),
        },
    };
    Draw {
        gate_key: format!("{NAMESPACE}/{key}"),
        key,
        mode,
        timeout_ms: deadlines[index].filter(|_| ask != Ask::Try),
        ask,
    }
}

/// The trying call of `draw`: `try_lock`, `try_lock_shared` or `try_acquire_permit`.
async fn try_call(session: &Session, draw: &Draw) -> Result<LockGuard, ClientError> {
    match draw.mode {
        Asked::Exclusive => session.try_lock(NAMESPACE, &draw.key).await,
        Asked::Shared => session.try_lock_shared(NAMESPACE, &draw.key).await,
        Asked::Permit => session.try_acquire_permit(NAMESPACE, &draw.key).await,
    }
}

/// The waiting call of `draw`: `lock_within` (shared or not) or `acquire_permit_within` with
/// the session's deadline for the key, or `lock` / `acquire_permit` without one.
async fn wait_call(session: &Session, draw: &Draw) -> Result<LockGuard, ClientError> {
    let (ns, key) = (NAMESPACE, draw.key.as_str());
    match (draw.mode, draw.timeout_ms.map(Duration::from_millis)) {
        (Asked::Exclusive, Some(t)) => session.lock_within(ns, key, t).await,
        (Asked::Exclusive, None) => session.lock(ns, key).await,
        (Asked::Shared, Some(t)) => session.lock_shared_within(ns, key, t).await,
        (Asked::Shared, None) => session.lock_shared(ns, key).await,
        (Asked::Permit, Some(t)) => session.acquire_permit_within(ns, key, t).await,
        (Asked::Permit, None) => session.acquire_permit(ns, key).await,
    }
}

/// The mode `guard` holds `draw`'s key in. A permit whose guard reports no slot is recorded in
/// slot `u32::MAX`, which checker 2 finds beyond every semaphore's N.
fn granted_mode(draw: &Draw, guard: &LockGuard) -> Mode {
    match draw.mode {
        Asked::Exclusive => Mode::Exclusive,
        Asked::Shared => Mode::Shared,
        Asked::Permit => Mode::Permit {
            slot: guard.slot().unwrap_or(u32::MAX),
        },
    }
}

/// What a call answered, for the history.
fn outcome_of(answer: &Result<LockGuard, ClientError>) -> Outcome {
    match answer {
        Ok(guard) => Outcome::Granted {
            token: guard.token().0,
        },
        Err(ClientError::Held { .. }) => Outcome::Busy,
        Err(ClientError::WaitTimedOut { .. }) => Outcome::TimedOut,
        Err(_) => Outcome::Failed,
    }
}

/// The guard of an answer, with what the client saw.
fn seen(
    answer: Result<LockGuard, ClientError>,
    cancel: Option<CancelSeen>,
) -> (Option<LockGuard>, Outcome, Option<CancelSeen>) {
    let outcome = outcome_of(&answer);
    (answer.ok(), outcome, cancel)
}

/// Runs `draw`'s acquire: the guard if granted, with what the client saw.
async fn acquire(
    ctx: &ClientCtx,
    session: &Session,
    draw: &Draw,
) -> (Option<LockGuard>, Outcome, Option<CancelSeen>) {
    match draw.ask {
        Ask::Try => seen(try_call(session, draw).await, None),
        Ask::Wait { ms } | Ask::DropAfter { ms } => {
            // A call with a deadline is awaited until it answers; one without is dropped.
            let limit = match (draw.ask, draw.timeout_ms) {
                (Ask::Wait { .. }, Some(t)) => t + 10_000,
                _ => ms,
            };
            let limit = Duration::from_millis(limit);
            match tokio::time::timeout(limit, wait_call(session, draw)).await {
                Ok(answer) => seen(answer, None),
                Err(_) => (None, Outcome::Dropped, None),
            }
        }
        Ask::CancelAfter { ms } => cancel_while_waiting(ctx, session, draw, ms).await,
    }
}

/// A waiting call, and after `ms` (if it has not answered) an explicit `cancel_wait`; then the
/// call's own answer, polled for up to [`AFTER_CANCEL_MS`] (a cancel that raced the grant
/// answers the hold, and so does the call).
async fn cancel_while_waiting(
    ctx: &ClientCtx,
    session: &Session,
    draw: &Draw,
    ms: u64,
) -> (Option<LockGuard>, Outcome, Option<CancelSeen>) {
    let call = wait_call(session, draw);
    tokio::pin!(call);
    tokio::select! {
        answer = &mut call => return seen(answer, None),
        () = tokio::time::sleep(Duration::from_millis(ms)) => {}
    }
    let Ok(answer) = session.cancel_wait(NAMESPACE, &draw.key).await else {
        // The cancel's answer is unknown: the call is dropped (cancelled in the background), as
        // a client giving up would.
        return (None, Outcome::Dropped, None);
    };
    let cancel = CancelSeen {
        removed: answer.removed,
        held_token: answer.held_token,
        revision: answer.revision,
    };
    let after = Duration::from_millis(AFTER_CANCEL_MS);
    let Ok(mut answer) = tokio::time::timeout(after, &mut call).await else {
        return (None, Outcome::Dropped, Some(cancel));
    };
    let requeue = lock(&ctx.shared).broken == Some(Break::RequeueCancelled);
    if requeue && cancel.removed && answer.is_err() {
        // The planted bug: the cancelled wait is asked for again and its grant taken as the
        // cancelled call's answer.
        match tokio::time::timeout(after, wait_call(session, draw)).await {
            Ok(again) => answer = again,
            Err(_) => return (None, Outcome::Dropped, Some(cancel)),
        }
    }
    seen(answer, Some(cancel))
}

fn record_attempt(
    ctx: &ClientCtx,
    session: &Session,
    draw: &Draw,
    outcome: Outcome,
    cancel: Option<CancelSeen>,
) {
    let mut s = lock(&ctx.shared);
    s.trace(&format!(
        "client {} session {} {} {:?} {:?} deadline {:?}: {outcome:?} cancel {cancel:?}",
        ctx.id,
        session.id(),
        draw.gate_key,
        draw.mode,
        draw.ask,
        draw.timeout_ms
    ));
    s.history.attempts.push(Attempt {
        client: ctx.id,
        session: session.id(),
        key: draw.gate_key.clone(),
        mode: draw.mode,
        ask: draw.ask,
        timeout_ms: draw.timeout_ms,
        outcome,
        cancel,
    });
}

/// A cancel answered with a hold (`token`) that the call did not return: the session holds
/// the key, acknowledged by the cancel's answer; released at once. (A permit's hold is not
/// recorded as a grant: the cancel's answer does not name its slot.)
async fn give_back(ctx: &ClientCtx, session: &Session, draw: &Draw, token: u64) {
    let released = session.release(NAMESPACE, &draw.key, Token(token)).await;
    let mut s = lock(&ctx.shared);
    let mode = match draw.mode {
        Asked::Exclusive => Some(Mode::Exclusive),
        Asked::Shared => Some(Mode::Shared),
        Asked::Permit => None,
    };
    if let Some(mode) = mode {
        s.history.acked.push(AckedOp::Grant {
            key: draw.gate_key.clone(),
            token,
            session: session.id(),
            mode,
        });
    }
    let at_ms = s.now_ms();
    s.history.grants_acked.push(GrantAcked { at_ms, token });
    if released.is_ok() {
        s.history.acked.push(AckedOp::Release {
            key: draw.gate_key.clone(),
            token,
        });
    }
}

/// Uses a grant: 1-4 accesses to the fenced resource while it is held (writes with an
/// exclusive token, writes in its slot with a permit's, reads through `check_read` with a
/// shared one), stopping at the lost-lock signal; then the release. Under `gate-bypass`
/// (writers), `slot-bypass` (permit holders) and `read-bypass` (readers) the client ignores the
/// loss: one more access with the old token, later.
async fn use_grant(
    ctx: &ClientCtx,
    draw: &Draw,
    guard: LockGuard,
    resource: &mut Option<ResourceConn>,
) {
    let token = guard.token().0;
    let mode = granted_mode(draw, &guard);
    {
        let mut s = lock(&ctx.shared);
        if let Mode::Permit { slot } = mode {
            s.trace(&format!(
                "client {} permit {} slot {slot} token {token}",
                ctx.id, draw.gate_key
            ));
        }
        s.history.acked.push(AckedOp::Grant {
            key: draw.gate_key.clone(),
            token,
            session: guard.session_id(),
            mode,
        });
        let at_ms = s.now_ms();
        s.history.grants_acked.push(GrantAcked { at_ms, token });
    }
    let accesses = thread_rng().gen_range(1..=4);
    for _ in 0..accesses {
        if !guard.is_held() {
            break;
        }
        tokio::select! {
            () = access(ctx.id, resource, mode, &draw.gate_key, token) => {}
            _ = guard.lost() => break,
        }
        let pause = thread_rng().gen_range(30..150);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    if guard.release().await.is_ok() {
        lock(&ctx.shared).history.acked.push(AckedOp::Release {
            key: draw.gate_key.clone(),
            token,
        });
    }
    let stale = matches!(
        (lock(&ctx.shared).broken, mode),
        (Some(Break::GateBypass), Mode::Exclusive)
            | (Some(Break::SlotBypass), Mode::Permit { .. })
            | (Some(Break::ReadBypass), Mode::Shared)
    );
    if stale {
        let (id, gate_key) = (ctx.id, draw.gate_key.clone());
        tokio::spawn(async move {
            let later = thread_rng().gen_range(200..800);
            tokio::time::sleep(Duration::from_millis(later)).await;
            access(id, &mut None, mode, &gate_key, token).await;
        });
    }
}

/// One access of a holder in `mode` to the fenced resource.
async fn access(
    client_id: u64,
    resource: &mut Option<ResourceConn>,
    mode: Mode,
    gate_key: &str,
    token: u64,
) {
    match mode {
        Mode::Exclusive => write_as(client_id, resource, gate_key, None, token).await,
        Mode::Permit { slot } => write_as(client_id, resource, gate_key, Some(slot), token).await,
        Mode::Shared => read_as(client_id, resource, gate_key, token).await,
    }
}

/// Linearizable reads of the workload's keys (`Inspect` without `allow_stale`, as
/// `picketctl inspect` asks), one every 50-250 ms, each recorded with when it was asked and the
/// revision it answered from (checker 9). Runs only with reads (`scripts/sim --reads`): the
/// seeds of runs without replay as before.
pub async fn run_reader(ctx: ClientCtx, client: Client) {
    while !lock(&ctx.shared).clients_stop {
        let pause = thread_rng().gen_range(50..250);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let key = format!("k{}", thread_rng().gen_range(0..KEYS));
        let started_ms = lock(&ctx.shared).now_ms();
        let answer = client
            .inspect(proto::InspectRequest {
                namespace: NAMESPACE.to_string(),
                key: key.clone(),
                allow_stale: false,
            })
            .await;
        if let Ok(info) = answer {
            let mut s = lock(&ctx.shared);
            let answered_ms = s.now_ms();
            s.history.reads.push(ReadSeen {
                client: ctx.id,
                key: format!("{NAMESPACE}/{key}"),
                started_ms,
                answered_ms,
                revision: info.revision,
            });
        }
    }
}
