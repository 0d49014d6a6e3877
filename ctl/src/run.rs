//! The long-running commands: `session --keep`, `lock NS KEY [-- CMD]`, `watch`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use picket_client::{Client, ClientError, KeepAliveAck, LockGuard, LostReason, SessionState};
use picket_core::locks::WAIT_TIMEOUT_MS_MAX;
use picket_proto::proto;
use serde_json::json;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use super::child::Group;
use super::render;
use super::{
    CtlError, Global, LockArgs, EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_LOCK_LOST, EXIT_OK,
    EXIT_TERMINATED,
};

fn say(json: bool, value: serde_json::Value, words: &str) {
    if json {
        println!("{value}");
    } else {
        eprintln!("picketctl: {words}");
    }
}

async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        // No signal handling here: never resolve, the other branches decide.
        std::future::pending::<()>().await;
    }
}

pub async fn session(client: &Client, keep: bool, json: bool) -> Result<u8, CtlError> {
    let session = client.create_session().await?;
    let ttl_ms = u64::try_from(session.ttl().as_millis()).unwrap_or(u64::MAX);
    // Printed this once: the secret is what `unlock` (and any raw call) must present.
    let secret = session.secret().to_hex();
    let value = json!({
        "session_id": session.id(),
        "ttl_ms": ttl_ms,
        "kept_alive": keep,
        "session_secret": secret,
    });
    if json {
        println!("{value}");
    } else {
        println!("session {} (ttl {ttl_ms} ms)", session.id());
        println!("session secret (SECRET, shown once; `unlock --secret` needs it): {secret}");
    }
    if !keep {
        // Not kept alive: the session expires after its TTL unless something keeps it alive.
        return Ok(EXIT_OK);
    }
    if !json {
        eprintln!(
            "picketctl: keeping session {} alive; ctrl-c closes it",
            session.id()
        );
    }
    tokio::select! {
        reason = session.lost() => Err(lost_error(session.id(), reason)),
        () = ctrl_c() => {
            let closed = session.close().await?;
            say(json, json!({"closed": true, "holds_released": closed.holds_released}),
                &format!("session closed ({} holds released)", closed.holds_released));
            Ok(EXIT_INTERRUPTED)
        }
    }
}

fn lost_error(session_id: u64, reason: LostReason) -> CtlError {
    CtlError::Client(picket_client::ClientError::SessionLost { session_id, reason })
}

/// A signal picketctl stops on (SIGINT, SIGTERM, SIGHUP): the command's group is stopped, the
/// lock released, and picketctl exits `128 + signal`.
struct Signals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
    hangup: Option<Signal>,
}

impl Signals {
    fn new() -> Signals {
        Signals {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
            hangup: signal(SignalKind::hangup()).ok(),
        }
    }

    /// Resolves with the exit status for the first of them to arrive.
    async fn next(&mut self) -> u8 {
        async fn one(signal: &mut Option<Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            () = one(&mut self.interrupt) => EXIT_INTERRUPTED,
            () = one(&mut self.terminate) => EXIT_TERMINATED,
            () = one(&mut self.hangup) => EXIT_HANGUP,
        }
    }
}

/// The class's default session TTL for `namespace/key` (a stale read from any replica), or
/// `None` (the cluster default) if it cannot be read.
async fn class_ttl_ms(global: &Global, namespace: &str, key: &str) -> Option<u64> {
    let client = Client::new(global.client_config(None)).ok()?;
    let info = client
        .inspect(proto::InspectRequest {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            allow_stale: true,
        })
        .await
        .ok()?;
    info.class
        .map(|class| class.session_ttl_ms_default)
        .filter(|ttl| *ttl > 0)
}

pub async fn lock(global: &Global, args: LockArgs, json: bool) -> Result<u8, CtlError> {
    let LockArgs {
        namespace,
        key,
        ttl_ms,
        no_wait,
        shared,
        permit,
        timeout,
        kill_grace,
        name,
        command,
    } = args;
    let (namespace, key) = (namespace.as_str(), key.as_str());
    let ttl_ms = match ttl_ms {
        Some(ttl) => Some(ttl),
        None => class_ttl_ms(global, namespace, key).await,
    };
    if let (Some(ttl), Some(grace)) = (ttl_ms, kill_grace) {
        check_grace(grace, Duration::from_millis(ttl))?;
    }
    if let Some(timeout) = timeout {
        check_wait_timeout(timeout)?;
    }
    let mut signals = Signals::new();
    // The command is spawned first (stopped), so that the session's identity records its pid.
    let mut group = match command.split_first() {
        Some((program, rest)) => Some(Group::spawn(program, rest)?),
        None => None,
    };
    let mut config = global.client_config(ttl_ms);
    config.identity_name = name.unwrap_or_else(|| default_name(&command));
    if let Some(group) = &group {
        config.identity_pid = group.pid();
    }
    let client = Client::new(config)?;
    let session = match client.create_session().await {
        Ok(session) => session,
        Err(error) => {
            if let Some(group) = &mut group {
                group.abandon().await;
            }
            return Err(error.into());
        }
    };
    let kill_grace = kill_grace.unwrap_or(KILL_GRACE_DEFAULT.min(session.ttl() / 3));
    if let Err(error) = check_grace(kill_grace, session.ttl()) {
        let _ = session.close().await;
        if let Some(group) = &mut group {
            group.abandon().await;
        }
        return Err(error);
    }
    let phase = Arc::new(AtomicU8::new(PHASE_WAITING));
    let _states = StateLog(tokio::spawn(log_states(
        session.state(),
        session.keepalive_acks(),
        session.id(),
        phase.clone(),
        json,
    )));
    // `--timeout` is the wait's server-side deadline: the cluster removes the wait when it
    // passes (so a picketctl that dies or is cut off leaves nothing queued) and answers that it
    // did. The local timer is only a backstop for a cluster that does not answer in time.
    let backstop = async {
        match timeout {
            Some(timeout) => tokio::time::sleep(timeout + client.config().rpc_timeout).await,
            None => std::future::pending::<()>().await,
        }
    };
    let timeout_ms = timeout.map_or(0, |t| t.as_millis());
    let acquired = tokio::select! {
        guard = async {
            match (no_wait, shared, timeout) {
                _ if permit => match (no_wait, timeout) {
                    (true, _) => session.try_acquire_permit(namespace, key).await,
                    (false, Some(timeout)) => {
                        session.acquire_permit_within(namespace, key, timeout).await
                    }
                    (false, None) => session.acquire_permit(namespace, key).await,
                },
                (true, false, _) => session.try_lock(namespace, key).await,
                (true, true, _) => session.try_lock_shared(namespace, key).await,
                (false, false, Some(timeout)) => session.lock_within(namespace, key, timeout).await,
                (false, true, Some(timeout)) => {
                    session.lock_shared_within(namespace, key, timeout).await
                }
                (false, false, None) => session.lock(namespace, key).await,
                (false, true, None) => session.lock_shared(namespace, key).await,
            }
        } => guard.map_err(|error| match error {
            ClientError::WaitTimedOut { .. } => CtlError::TimedOut(format!(
                "{namespace}/{key} was not granted within {timeout_ms} ms; the cluster removed the wait"
            )),
            error => error.into(),
        }),
        () = backstop => Err(CtlError::TimedOut(format!(
            "{namespace}/{key} was not granted within {timeout_ms} ms (the cluster did not answer in time); left the queue"
        ))),
        code = signals.next() => Err(CtlError::Signalled(code)),
    };
    let guard = match acquired {
        Ok(guard) => guard,
        Err(error) => {
            // Whatever ended the wait, leave the queue: closing the session removes its waits
            // in one revision (so it is never granted with nobody there).
            let _ = session.close().await;
            if let Some(group) = &mut group {
                group.abandon().await;
            }
            return match error {
                CtlError::Signalled(code) => Ok(code),
                error => Err(error),
            };
        }
    };
    say(
        json,
        json!({"event": "acquired", "namespace": namespace, "key": key, "token": guard.token().0,
               "slot": guard.slot(), "session_id": session.id(), "pid": group.as_ref().map(Group::pid)}),
        &format!(
            "holding {namespace}/{key}{} with token {} (session {}{})",
            guard
                .slot()
                .map(|slot| format!(" permit slot {slot}"))
                .unwrap_or_default(),
            guard.token().0,
            session.id(),
            group
                .as_ref()
                .map(|g| format!(", command pid {}", g.pid()))
                .unwrap_or_default()
        ),
    );
    let running = if group.is_some() {
        PHASE_RUNNING
    } else {
        PHASE_HOLDING
    };
    phase.store(running, Ordering::Relaxed);
    let code = match &mut group {
        Some(group) => run_under(&guard, group, kill_grace, &mut signals, json).await?,
        None => hold(&guard, &mut signals, json).await,
    };
    if code != EXIT_LOCK_LOST {
        // Released explicitly; closing the session then frees anything left.
        let released = guard.release().await;
        let _ = session.close().await;
        released?;
        say(
            json,
            json!({"event": "released"}),
            &format!("released {namespace}/{key}"),
        );
    } else {
        drop(guard);
        let _ = session.close().await;
    }
    Ok(code)
}

/// What `picketctl lock` is doing, for the lines it logs about the session's state.
const PHASE_WAITING: u8 = 0;
const PHASE_HOLDING: u8 = 1;
const PHASE_RUNNING: u8 = 2;

/// The task logging the session's states; ended with the command.
struct StateLog(tokio::task::JoinHandle<()>);

impl Drop for StateLog {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.1} s", duration.as_secs_f64())
}

/// One line per change of the session's state: jeopardy and safe (the loss is said where
/// picketctl acts on it: `LOCK LOST ...`, or the error that ends the wait).
async fn log_states(
    mut states: watch::Receiver<SessionState>,
    acks: watch::Receiver<KeepAliveAck>,
    session_id: u64,
    phase: Arc<AtomicU8>,
    json: bool,
) {
    while states.changed().await.is_ok() {
        let state = states.borrow_and_update().clone();
        match state {
            SessionState::Jeopardy {
                unacknowledged_for,
                ttl,
                deadline_in,
            } => {
                let going_on = match phase.load(Ordering::Relaxed) {
                    PHASE_WAITING => "picketctl keeps waiting for the lock",
                    PHASE_HOLDING => {
                        "the lock is still held; picketctl exits 3 if the session is lost"
                    }
                    _ => "the command keeps running; it is stopped if the session is lost",
                };
                say(
                    json,
                    json!({"event": "jeopardy", "session_id": session_id,
                           "unacknowledged_ms": unacknowledged_for.as_millis() as u64,
                           "ttl_ms": ttl.as_millis() as u64,
                           "deadline_in_ms": deadline_in.as_millis() as u64}),
                    &format!(
                        "session {session_id} in jeopardy: no keepalive acknowledged for {} of a {} TTL; \
                         the session is lost in {} unless one is; {going_on}",
                        seconds(unacknowledged_for),
                        seconds(ttl),
                        seconds(deadline_in)
                    ),
                );
            }
            SessionState::Safe => {
                let deadline_in = acks
                    .borrow()
                    .deadline()
                    .saturating_duration_since(tokio::time::Instant::now());
                say(
                    json,
                    json!({"event": "safe", "session_id": session_id,
                           "deadline_in_ms": deadline_in.as_millis() as u64}),
                    &format!(
                        "session {session_id} safe again: a keepalive was acknowledged, the lease \
                         (and the lock) held throughout; next deadline in {}",
                        seconds(deadline_in)
                    ),
                );
            }
            SessionState::Healthy => {}
            SessionState::Lost(_) => return,
        }
    }
}

/// `--timeout` is the wait's server-side deadline: 1 ms to one day.
fn check_wait_timeout(timeout: Duration) -> Result<(), CtlError> {
    let ms = timeout.as_millis();
    if ms == 0 || ms > u128::from(WAIT_TIMEOUT_MS_MAX) {
        return Err(CtlError::Refused(format!(
            "--timeout {ms} ms is out of range: a wait deadline is 1 ms to one day \
             ({WAIT_TIMEOUT_MS_MAX} ms)"
        )));
    }
    Ok(())
}

/// `--kill-grace` when not given (or a third of the TTL if that is shorter).
const KILL_GRACE_DEFAULT: Duration = Duration::from_secs(3);

fn check_grace(grace: Duration, ttl: Duration) -> Result<(), CtlError> {
    if grace >= ttl {
        return Err(CtlError::Refused(format!(
            "--kill-grace {} ms is not below the session TTL of {} ms: the command could outlive \
             the lock by its whole grace period; give a shorter --kill-grace",
            grace.as_millis(),
            ttl.as_millis()
        )));
    }
    Ok(())
}

fn default_name(command: &[String]) -> String {
    command
        .first()
        .and_then(|program| std::path::Path::new(program).file_name())
        .and_then(|name| name.to_str())
        .filter(|name| !name.is_empty())
        .unwrap_or("picketctl")
        .to_owned()
}

async fn hold(guard: &LockGuard, signals: &mut Signals, json: bool) -> u8 {
    if !json {
        eprintln!("picketctl: ctrl-c releases the lock");
    }
    tokio::select! {
        reason = guard.lost() => {
            say(json, json!({"event": "lost", "reason": reason.to_string()}), &format!("LOCK LOST: {reason}"));
            EXIT_LOCK_LOST
        }
        code = signals.next() => code,
    }
}

/// Runs the command (already spawned, stopped) with the lock's environment; stops its whole
/// group if the lock is lost or picketctl is signalled; stops what is left of the group when
/// the command exits by itself.
async fn run_under(
    guard: &LockGuard,
    group: &mut Group,
    grace: Duration,
    signals: &mut Signals,
    json: bool,
) -> Result<u8, CtlError> {
    let mut env = vec![
        ("PICKET_TOKEN", guard.token().0.to_string()),
        ("PICKET_NAMESPACE", guard.namespace().to_owned()),
        ("PICKET_KEY", guard.key().to_owned()),
        ("PICKET_SESSION", guard.session_id().to_string()),
    ];
    if let Some(slot) = guard.slot() {
        env.push(("PICKET_SLOT", slot.to_string()));
    }
    if let Err(error) = group.start(&env).await {
        group.abandon().await;
        return Err(error);
    }
    let pid = group.pid();
    tokio::select! {
        status = group.wait() => {
            let code = exit_code(status?);
            // Anything the command left running in its group must not outlive the lock.
            group.terminate(grace).await;
            Ok(code)
        }
        reason = guard.lost() => {
            say(json, json!({"event": "lost", "reason": reason.to_string(), "pid": pid}),
                &format!("LOCK LOST ({reason}): stopping the command (process group {pid}: SIGTERM, then SIGKILL after {} ms)", grace.as_millis()));
            group.terminate(grace).await;
            Ok(EXIT_LOCK_LOST)
        }
        code = signals.next() => {
            say(json, json!({"event": "signalled", "exit": code, "pid": pid}),
                &format!("signalled: stopping the command (process group {pid}), then releasing the lock"));
            group.terminate(grace).await;
            Ok(code)
        }
    }
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code).unwrap_or(1);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return u8::try_from(128 + signal).unwrap_or(1);
        }
    }
    1
}

pub async fn watch(
    client: &Client,
    namespace: &str,
    prefix: &str,
    from: Option<u64>,
    json: bool,
) -> Result<u8, CtlError> {
    let mut watcher = match from {
        Some(from) => client.watch(Some(namespace), prefix, from),
        None => client.watch_from_now(Some(namespace), prefix),
    };
    let mut backoff = WATCH_BACKOFF_MIN;
    loop {
        tokio::select! {
            page = watcher.next_page() => match page {
                Ok(events) => {
                    backoff = WATCH_BACKOFF_MIN;
                    for event in events {
                        if json {
                            println!("{}", render::event_json(&event));
                        } else {
                            println!("{}", render::event_words(&event));
                        }
                    }
                }
                // History is gone, or the request is refused: retrying cannot help.
                Err(error @ (ClientError::Compacted { .. } | ClientError::Refused { .. })) => {
                    return Err(error.into())
                }
                Err(error) => {
                    // An outage: keep trying from where the stream broke.
                    say(json, json!({"event": "reconnecting", "resume_from": watcher.resume_from(),
                                     "retry_in_ms": backoff.as_millis() as u64, "error": error.to_string()}),
                        &format!("cluster unreachable ({error}); reconnecting in {} ms from revision {}",
                                 backoff.as_millis(), watcher.resume_from()));
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(WATCH_BACKOFF_MAX);
                }
            },
            () = ctrl_c() => return Ok(EXIT_OK),
        }
    }
}

/// Waits between reconnection attempts of `watch` (doubling up to the max).
const WATCH_BACKOFF_MIN: Duration = Duration::from_millis(500);
const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(10);
