//! The long-running commands: `session --keep`, `lock NS KEY [-- CMD]`, `watch`.

use std::process::Stdio;

use picket_net::client::{Client, LockGuard, LostReason};
use serde_json::json;
use tokio::process::Command as Process;

use super::render;
use super::{CtlError, EXIT_INTERRUPTED, EXIT_LOCK_LOST, EXIT_OK};

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
    CtlError::Client(picket_net::client::ClientError::SessionLost { session_id, reason })
}

pub async fn lock(
    client: &Client,
    namespace: &str,
    key: &str,
    no_wait: bool,
    command: &[String],
    json: bool,
) -> Result<u8, CtlError> {
    let session = client.create_session().await?;
    let guard = tokio::select! {
        guard = async {
            if no_wait { session.try_lock(namespace, key).await } else { session.lock(namespace, key).await }
        } => guard?,
        () = ctrl_c() => {
            // Leaves the queue with the session.
            let _ = session.close().await;
            return Ok(EXIT_INTERRUPTED);
        }
    };
    say(
        json,
        json!({"event": "acquired", "namespace": namespace, "key": key, "token": guard.token().0, "session_id": session.id()}),
        &format!(
            "holding {namespace}/{key} with token {} (session {})",
            guard.token().0,
            session.id()
        ),
    );
    let code = match command.split_first() {
        Some((program, args)) => run_under(&guard, program, args, json).await?,
        None => hold(&guard, json).await?,
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
    }
    Ok(code)
}

async fn hold(guard: &LockGuard, json: bool) -> Result<u8, CtlError> {
    if !json {
        eprintln!("picketctl: ctrl-c releases the lock");
    }
    tokio::select! {
        reason = guard.lost() => {
            say(json, json!({"event": "lost", "reason": reason.to_string()}), &format!("LOCK LOST: {reason}"));
            Ok(EXIT_LOCK_LOST)
        }
        () = ctrl_c() => Ok(EXIT_INTERRUPTED),
    }
}

/// Runs `program args` with the lock's environment; kills it if the lock is lost.
async fn run_under(
    guard: &LockGuard,
    program: &str,
    args: &[String],
    json: bool,
) -> Result<u8, CtlError> {
    let mut child = Process::new(program)
        .args(args)
        .env("PICKET_TOKEN", guard.token().0.to_string())
        .env("PICKET_NAMESPACE", guard.namespace())
        .env("PICKET_KEY", guard.key())
        .env("PICKET_SESSION", guard.session_id().to_string())
        .stdin(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| CtlError::Io(format!("cannot run `{program}`: {e}")))?;
    tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| CtlError::Io(format!("waiting for `{program}`: {e}")))?;
            Ok(exit_code(status))
        }
        reason = guard.lost() => {
            let _ = child.kill().await;
            say(json, json!({"event": "lost", "reason": reason.to_string(), "killed": program}),
                &format!("LOCK LOST ({reason}): killed `{program}`"));
            Ok(EXIT_LOCK_LOST)
        }
        () = ctrl_c() => {
            let _ = child.kill().await;
            Ok(EXIT_INTERRUPTED)
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
    from: u64,
    json: bool,
) -> Result<u8, CtlError> {
    let mut watcher = client.watch(Some(namespace), prefix, from);
    loop {
        tokio::select! {
            page = watcher.next_page() => {
                for event in page? {
                    if json {
                        println!("{}", render::event_json(&event));
                    } else {
                        println!("{}", render::event_words(&event));
                    }
                }
            }
            () = ctrl_c() => return Ok(EXIT_OK),
        }
    }
}
