//! How answers are shown: text for people, JSON (stable field names, the proto's) for scripts.

use std::fmt::Write as _;

use picket_common::audit_report::{self, kind_word, role_words};
pub use picket_common::wall_clock::utc;
use picket_proto::proto;
use serde_json::{json, Value};

use super::CtlError;

/// One command's answer in both forms.
#[derive(Debug)]
pub struct Report {
    pub json: Value,
    pub human: String,
}

impl Report {
    pub fn print(&self, json: bool) {
        if json {
            println!("{}", self.json);
        } else {
            print!("{}", self.human);
        }
    }
}

/// The plain words for the fenced flag, shown before any force-release step.
pub fn fenced_words(fenced: bool) -> &'static str {
    if fenced {
        "FENCED: the resource checks tokens, so the old holder's writes will be refused after the release"
    } else {
        "ADVISORY (not fenced): the resource does NOT check tokens; if the old holder is still running, releasing may let two writers in"
    }
}

/// What the holder learns of a force-release, said at request and approval.
pub fn holder_learns(revoke_session: bool) -> &'static str {
    if revoke_session {
        "The holder's session is revoked: every client of it learns that all its locks are lost, at once if it is on the session stream (the client library's default, picketctl lock), else at its next keepalive."
    } else {
        "WITHOUT --revoke-session the holder's session lives on. A Picket client (the client library, picketctl lock) learns that this lock is gone, at once on the session stream, else at its next keepalive, and stops (picketctl lock stops its command); a process that is paused, partitioned, or does not use a Picket client learns NOTHING and may go on writing. Revoke the session (a new request with --revoke-session) if you are not sure."
    }
}

pub fn error_json(error: &CtlError) -> Value {
    let rule = match error {
        CtlError::Client(client) => client.rule().unwrap_or("").to_owned(),
        CtlError::Refused(_) => "refused_by_picketctl".to_owned(),
        CtlError::Io(_) => "io".to_owned(),
        CtlError::TimedOut(_) => "wait_timed_out".to_owned(),
        CtlError::Signalled(_) => "signalled".to_owned(),
    };
    let mut out = json!({ "error": error.to_string(), "rule": rule });
    if let Some(hint) = error.hint() {
        out["hint"] = json!(hint);
    }
    out
}

fn seconds(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1_000.0)
    }
}

fn identity_json(identity: Option<&proto::Identity>) -> Value {
    let identity = identity.cloned().unwrap_or_default();
    json!({
        "name": identity.name,
        "host": identity.host,
        "pid": identity.pid,
        "principal": identity.principal,
    })
}

fn identity_words(identity: Option<&proto::Identity>) -> String {
    let Some(identity) = identity else {
        return "?".into();
    };
    let mut words = identity.name.clone();
    if !identity.host.is_empty() {
        let _ = write!(words, "@{}", identity.host);
    }
    if identity.pid != 0 {
        let _ = write!(words, " pid {}", identity.pid);
    }
    if !identity.principal.is_empty() {
        let _ = write!(words, " ({})", identity.principal);
    }
    words
}

pub fn hold_json(hold: &proto::HoldInfo) -> Value {
    json!({
        "namespace": hold.namespace,
        "key": hold.key,
        "session_id": hold.session_id,
        "identity": identity_json(hold.identity.as_ref()),
        "token": hold.token,
        "granted_at_ms": hold.granted_at_ms,
        "held_for_ms": hold.held_for_ms,
        "session_ttl_ms": hold.session_ttl_ms,
        "session_remaining_ms": hold.session_remaining_ms,
        "hold_ms_max_expected": hold.hold_ms_max_expected,
        "mode": mode_word(hold.mode),
        "slot": hold.slot,
    })
}

/// `exclusive`, `shared` or `permit` (an unknown value as its number).
fn mode_word(mode: i32) -> String {
    match proto::LockMode::try_from(mode) {
        Ok(proto::LockMode::Exclusive) => "exclusive".to_owned(),
        Ok(proto::LockMode::Shared) => "shared".to_owned(),
        Ok(proto::LockMode::Permit) => "permit".to_owned(),
        Err(_) => format!("mode {mode}"),
    }
}

pub fn class_json(class: &proto::ClassSpec) -> Value {
    json!({
        "name": class.name,
        "prefix": class.prefix,
        "fenced": class.fenced,
        "session_ttl_ms_default": class.session_ttl_ms_default,
        "session_ttl_ms_max": class.session_ttl_ms_max,
        "hold_ms_max_expected": class.hold_ms_max_expected,
        "owner": class.owner,
        "runbook_url": class.runbook_url,
        "description": class.description,
    })
}

pub fn force_release_json(request: &proto::ForceReleaseInfo) -> Value {
    json!({
        "id": request.id,
        "namespace": request.namespace,
        "key": request.key,
        "holder_session_id": request.holder_session_id,
        "token": request.token,
        "requester": request.requester,
        "reason": request.reason,
        "revoke_session": request.revoke_session,
        "fenced": request.fenced,
        "safety": request.safety,
        "requested_at_ms": request.requested_at_ms,
        "expires_at_ms": request.expires_at_ms,
        "requester_roles": role_words(&request.requester_roles),
        "holder_changed": request.holder_changed,
        "fenced_now": request.fenced_now,
    })
}

pub fn key_info(info: &proto::KeyInfo) -> Report {
    let class = info.class.clone().unwrap_or_default();
    let json = json!({
        "revision": info.revision,
        "namespace": info.namespace,
        "key": info.key,
        "class": class_json(&class),
        "fenced": class.fenced,
        "holder": info.holder.as_ref().map(hold_json),
        "mode": info.holder.as_ref().map(|_| mode_word(info.mode)),
        "holders": info.holders.iter().map(hold_json).collect::<Vec<_>>(),
        "queue_depth": info.queue_depth,
        "waiters": info.waiters.iter().map(|w| json!({
            "session_id": w.session_id,
            "identity": identity_json(w.identity.as_ref()),
            "position": w.position,
            "waiting_for_ms": w.waiting_for_ms,
            "mode": mode_word(w.mode),
        })).collect::<Vec<_>>(),
        "floor": info.floor,
        "pending_force_releases": info.pending_force_releases.iter().map(force_release_json).collect::<Vec<_>>(),
        "permits": info.permits,
        "slot_floors": info.slot_floors.iter().map(|f| json!({"slot": f.slot, "floor": f.floor})).collect::<Vec<_>>(),
    });
    let mut human = format!(
        "{}/{} (revision {})\n",
        info.namespace, info.key, info.revision
    );
    if let Some(permits) = info.permits {
        let _ = writeln!(
            human,
            "  semaphore: {permits} permits, {} held",
            info.holders.len()
        );
    }
    match &info.holder {
        // A shared key or a semaphore: every holder on its own line (with its slot).
        Some(_) if info.mode == proto::LockMode::Shared as i32 || info.permits.is_some() => {
            if info.permits.is_none() {
                let _ = writeln!(human, "  mode:     shared, {} holders", info.holders.len());
            }
            for hold in &info.holders {
                let slot = hold.slot.map(|s| format!("slot {s}: ")).unwrap_or_default();
                let remaining = hold
                    .session_remaining_ms
                    .map_or("unknown".to_owned(), seconds);
                let _ = writeln!(
                    human,
                    "    {slot}session {} — {}, token {}, held for {}, ttl {}, remaining {remaining}",
                    hold.session_id,
                    identity_words(hold.identity.as_ref()),
                    hold.token,
                    seconds(hold.held_for_ms),
                    seconds(hold.session_ttl_ms)
                );
            }
        }
        Some(hold) => {
            let _ = writeln!(
                human,
                "  holder:   session {} — {}\n  token:    {}\n  held for: {}",
                hold.session_id,
                identity_words(hold.identity.as_ref()),
                hold.token,
                seconds(hold.held_for_ms)
            );
            let remaining = hold
                .session_remaining_ms
                .map_or("unknown".to_owned(), seconds);
            let _ = writeln!(
                human,
                "  session:  ttl {}, remaining {remaining}",
                seconds(hold.session_ttl_ms)
            );
        }
        None => human.push_str("  free\n"),
    }
    let _ = writeln!(human, "  queue:    {} waiting", info.queue_depth);
    for waiter in &info.waiters {
        let _ = writeln!(
            human,
            "    {}. session {} — {} (waiting {}, {})",
            waiter.position,
            waiter.session_id,
            identity_words(waiter.identity.as_ref()),
            seconds(waiter.waiting_for_ms),
            mode_word(waiter.mode)
        );
    }
    let _ = writeln!(
        human,
        "  class:    {} (prefix {:?}, owner {:?})\n  {}",
        class.name,
        class.prefix,
        class.owner,
        fenced_words(class.fenced)
    );
    if !class.runbook_url.is_empty() {
        let _ = writeln!(human, "  runbook:  {}", class.runbook_url);
    }
    if let Some(floor) = info.floor {
        let _ = writeln!(human, "  floor:    {floor}");
    }
    if !info.slot_floors.is_empty() {
        let floors: Vec<String> = info
            .slot_floors
            .iter()
            .map(|f| format!("slot {} {}", f.slot, f.floor))
            .collect();
        let _ = writeln!(human, "  slot floors: {}", floors.join(", "));
    }
    for request in &info.pending_force_releases {
        let _ = writeln!(
            human,
            "  pending force-release {} by {}: {:?}",
            request.id, request.requester, request.reason
        );
    }
    Report { json, human }
}

pub fn holds(namespace: &str, response: &proto::ListHoldsResponse) -> Report {
    let json = json!({
        "namespace": namespace,
        "revision": response.revision,
        "holds": response.holds.iter().map(hold_json).collect::<Vec<_>>(),
    });
    let mut human = format!(
        "{} holds in {namespace} (revision {}), oldest first\n",
        response.holds.len(),
        response.revision
    );
    for hold in &response.holds {
        let _ = writeln!(
            human,
            "  {:<30} token {:<8} held {:<10} session {} — {}",
            hold.key,
            hold.token,
            seconds(hold.held_for_ms),
            hold.session_id,
            identity_words(hold.identity.as_ref())
        );
    }
    Report { json, human }
}

pub fn classes(listing: &[(String, Vec<proto::ClassSpec>)]) -> Report {
    let json = json!({
        "namespaces": listing.iter().map(|(namespace, classes)| json!({
            "namespace": namespace,
            "classes": classes.iter().map(class_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    let mut human = String::new();
    for (namespace, classes) in listing {
        let _ = writeln!(human, "{namespace}:");
        for class in classes {
            let _ = writeln!(
                human,
                "  {:<20} prefix {:<16} {:<8} ttl {}/{} owner {:?}",
                class.name,
                format!("{:?}", class.prefix),
                if class.fenced { "fenced" } else { "advisory" },
                seconds(class.session_ttl_ms_default),
                seconds(class.session_ttl_ms_max),
                class.owner
            );
        }
    }
    if listing.is_empty() {
        human.push_str("no namespace holds locks; name one: picketctl classes NS\n");
    }
    Report { json, human }
}

pub fn audit(response: &proto::QueryAuditResponse) -> Report {
    let json = audit_report::response_json(response);
    let mut human = String::new();
    if response.compacted_through > 0 {
        let _ = writeln!(
            human,
            "(records up to revision {} may have been dropped)",
            response.compacted_through
        );
    }
    for r in &response.records {
        human.push_str(&audit_report::record_line(r));
        human.push('\n');
    }
    Report { json, human }
}

pub fn event_json(event: &proto::Event) -> Value {
    use proto::event::Kind;
    let (kind, detail) = match &event.kind {
        Some(Kind::Granted(g)) => (
            "granted",
            json!({"session_id": g.session_id, "token": g.token, "mode": mode_word(g.mode), "slot": g.slot}),
        ),
        Some(Kind::Queued(q)) => (
            "queued",
            json!({"session_id": q.session_id, "position": q.position}),
        ),
        Some(Kind::Released(r)) => (
            "released",
            json!({"session_id": r.session_id, "token": r.token, "cause": cause_words(r.cause)}),
        ),
        Some(Kind::WaitRemoved(w)) => (
            "wait_removed",
            json!({"session_id": w.session_id, "cause": cause_words(w.cause)}),
        ),
        Some(Kind::ForceReleased(f)) => (
            "force_released",
            json!({"session_id": f.session_id, "token": f.token, "force_release_id": f.force_release_id, "session_revoked": f.session_revoked}),
        ),
        Some(Kind::ClassChanged(c)) => (
            "class_changed",
            json!({"class": c.class, "removed": c.removed}),
        ),
        Some(Kind::SemaphoreChanged(c)) => (
            "semaphore_changed",
            json!({"permits": c.permits, "previous_permits": c.previous_permits}),
        ),
        None => ("unknown", json!({})),
    };
    json!({
        "revision": event.revision,
        "time_ms": event.time_ms,
        "time": utc(event.time_ms),
        "namespace": event.namespace,
        "key": event.key,
        "kind": kind,
        "detail": detail,
        "identity": event.identity.as_ref().map(|i| identity_json(Some(i))),
    })
}

fn cause_words(cause: i32) -> &'static str {
    match proto::ReleaseCause::try_from(cause) {
        Ok(proto::ReleaseCause::Released) => "released",
        Ok(proto::ReleaseCause::SessionClosed) => "session closed",
        Ok(proto::ReleaseCause::SessionExpired) => "session expired",
        Ok(proto::ReleaseCause::SessionRevoked) => "session revoked",
        _ => "unknown",
    }
}

pub fn event_words(event: &proto::Event) -> String {
    use proto::event::Kind;
    let value = event_json(event);
    let what = match &event.kind {
        Some(Kind::Granted(g)) => match g.slot {
            Some(slot) => format!(
                "permit slot {slot} granted to session {} with token {}",
                g.session_id, g.token
            ),
            None if g.mode == proto::LockMode::Shared as i32 => format!(
                "granted shared to session {} with token {}",
                g.session_id, g.token
            ),
            None => format!("granted to session {} with token {}", g.session_id, g.token),
        },
        Some(Kind::Queued(q)) => {
            format!("session {} queued at position {}", q.session_id, q.position)
        }
        Some(Kind::Released(r)) => format!(
            "released by session {} (token {}, {})",
            r.session_id,
            r.token,
            cause_words(r.cause)
        ),
        Some(Kind::WaitRemoved(w)) => {
            format!(
                "session {} left the queue ({})",
                w.session_id,
                cause_words(w.cause)
            )
        }
        Some(Kind::ForceReleased(f)) => format!(
            "FORCE-RELEASED from session {} (token {}, request #{}{})",
            f.session_id,
            f.token,
            f.force_release_id,
            if f.session_revoked {
                ", session revoked"
            } else {
                ", session not revoked"
            }
        ),
        Some(Kind::ClassChanged(c)) => format!(
            "class {} {}",
            c.class,
            if c.removed { "removed" } else { "put" }
        ),
        Some(Kind::SemaphoreChanged(c)) if c.permits == 0 => {
            format!("semaphore removed (had {} permits)", c.previous_permits)
        }
        Some(Kind::SemaphoreChanged(c)) => format!(
            "semaphore set to {} permits (was {})",
            c.permits, c.previous_permits
        ),
        None => value["kind"].as_str().unwrap_or("?").to_owned(),
    };
    let who = event
        .identity
        .as_ref()
        .map(|i| format!(" — {}", identity_words(Some(i))))
        .unwrap_or_default();
    format!(
        "rev {:<8} {} {}/{} {what}{who}",
        event.revision,
        utc(event.time_ms),
        event.namespace,
        event.key,
    )
}

pub fn force_release_list(requests: &[proto::ForceReleaseInfo]) -> Report {
    let json = json!({ "requests": requests.iter().map(force_release_json).collect::<Vec<_>>() });
    let mut human = format!(
        "{} pending force-release requests (expired ones are not listed)\n",
        requests.len()
    );
    for r in requests {
        let _ = writeln!(
            human,
            "  #{} {}/{} token {} holder session {} by {} ({}) {:?}{}, expires {}\n     {}",
            r.id,
            r.namespace,
            r.key,
            r.token,
            r.holder_session_id,
            r.requester,
            role_words(&r.requester_roles),
            r.reason,
            if r.revoke_session {
                ", revoke session"
            } else {
                ", session not revoked"
            },
            utc(r.expires_at_ms),
            fenced_words(r.fenced)
        );
        if r.holder_changed {
            let _ = writeln!(
                human,
                "     STALE: the key's holder or token changed since; it cannot be approved (deny it)"
            );
        }
        if let Some(now) = r.fenced_now.filter(|now| *now != r.fenced) {
            let _ = writeln!(
                human,
                "     STALE: the class is {} now (was {}); it cannot be approved (deny it, request again)",
                kind_word(now),
                kind_word(r.fenced)
            );
        }
    }
    Report { json, human }
}

pub fn semaphore_set(
    namespace: &str,
    key: &str,
    permits: u32,
    response: &proto::SetSemaphoreResponse,
) -> Report {
    let json = json!({
        "namespace": namespace,
        "key": key,
        "permits": permits,
        "previous_permits": response.previous_permits,
        "revision": response.revision,
    });
    let previous = response.previous_permits;
    let human = match (previous, permits) {
        (p, n) if p == n => format!("{namespace}/{key}: unchanged ({n} permits)\n"),
        (_, 0) => format!(
            "{namespace}/{key}: no longer a semaphore (had {previous} permits; revision {})\n",
            response.revision
        ),
        (0, n) => format!(
            "{namespace}/{key}: a semaphore with {n} permits (revision {})\n",
            response.revision
        ),
        (p, n) => format!(
            "{namespace}/{key}: {n} permits (was {p}; revision {})\n",
            response.revision
        ),
    };
    Report { json, human }
}
