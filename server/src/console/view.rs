//! What the pages show, made from the gRPC answers: plain strings and numbers, so the templates
//! only lay them out (every rule and every word of the safety statement comes from the server or
//! the core, never from a second copy here).

use picket_core::locks::ClassSpec;
use picket_proto::proto;

use crate::wall_clock::{duration, utc};

/// The class of a key, as the judge-and-request banner needs it.
pub struct ClassView {
    pub name: String,
    pub prefix: String,
    pub fenced: bool,
    /// `FENCED` or `ADVISORY`.
    pub kind: &'static str,
    /// The core's safety statement for the kind.
    pub safety: &'static str,
    pub owner: String,
    pub runbook_url: String,
    pub description: String,
    /// The max expected hold, in words (`""`: none set).
    pub threshold: String,
    pub threshold_ms: u64,
}

impl ClassView {
    pub fn of(class: &proto::ClassSpec) -> ClassView {
        ClassView {
            name: class.name.clone(),
            prefix: class.prefix.clone(),
            fenced: class.fenced,
            kind: kind_word(class.fenced),
            safety: ClassSpec::safety_statement(class.fenced),
            owner: class.owner.clone(),
            runbook_url: class.runbook_url.clone(),
            description: class.description.clone(),
            threshold: ClassView::threshold_words(class.hold_ms_max_expected),
            threshold_ms: class.hold_ms_max_expected,
        }
    }

    /// The max expected hold in words (`""`: none set, the class never pages).
    pub fn threshold_words(hold_ms_max_expected: u64) -> String {
        match hold_ms_max_expected {
            0 => String::new(),
            ms => duration(ms),
        }
    }
}

pub fn kind_word(fenced: bool) -> &'static str {
    if fenced {
        "FENCED"
    } else {
        "ADVISORY"
    }
}

pub fn mode_word(mode: i32) -> &'static str {
    match proto::LockMode::try_from(mode) {
        Ok(proto::LockMode::Shared) => "shared",
        Ok(proto::LockMode::Exclusive) => "exclusive",
        _ => "unknown",
    }
}

/// One holder card.
pub struct HolderView {
    pub session_id: u64,
    pub name: String,
    pub host: String,
    pub pid: u32,
    pub principal: String,
    pub token: u64,
    pub mode: &'static str,
    pub granted_at: String,
    pub held_for: String,
    /// `"over by 4 min 2 s"` when the hold is past the class's max expected hold.
    pub over: String,
    pub ttl: String,
    /// `"renewed 1 s ago"` (leader-local; `""` when the answering replica does not know).
    pub renewed: String,
}

impl HolderView {
    pub fn of(hold: &proto::HoldInfo) -> HolderView {
        let identity = hold.identity.clone().unwrap_or_default();
        let threshold = hold.hold_ms_max_expected;
        HolderView {
            session_id: hold.session_id,
            name: identity.name,
            host: identity.host,
            pid: identity.pid,
            principal: identity.principal,
            token: hold.token,
            mode: mode_word(hold.mode),
            granted_at: utc(hold.granted_at_ms),
            held_for: duration(hold.held_for_ms),
            over: if threshold > 0 && hold.held_for_ms > threshold {
                format!(
                    "over the class's {} by {}",
                    duration(threshold),
                    duration(hold.held_for_ms - threshold)
                )
            } else {
                String::new()
            },
            ttl: duration(hold.session_ttl_ms),
            renewed: match hold.session_remaining_ms {
                Some(remaining) if remaining <= hold.session_ttl_ms => format!(
                    "last renewed {} ago, expires in {} unless renewed",
                    duration(hold.session_ttl_ms - remaining),
                    duration(remaining)
                ),
                _ => String::new(),
            },
        }
    }
}

pub struct WaiterView {
    pub position: u32,
    pub session_id: u64,
    pub name: String,
    pub host: String,
    pub pid: u32,
    pub principal: String,
    pub mode: &'static str,
    pub waiting_for: String,
}

impl WaiterView {
    pub fn of(waiter: &proto::WaiterInfo) -> WaiterView {
        let identity = waiter.identity.clone().unwrap_or_default();
        WaiterView {
            position: waiter.position,
            session_id: waiter.session_id,
            name: identity.name,
            host: identity.host,
            pid: identity.pid,
            principal: identity.principal,
            mode: mode_word(waiter.mode),
            waiting_for: duration(waiter.waiting_for_ms),
        }
    }
}

/// A pending force-release request.
pub struct PendingView {
    pub id: u64,
    /// The key's console page.
    pub href: String,
    pub namespace: String,
    pub key: String,
    pub holder_session_id: u64,
    pub token: u64,
    pub requester: String,
    pub requester_roles: String,
    pub reason: String,
    pub revoke_session: bool,
    pub fenced: bool,
    pub kind: &'static str,
    pub safety: String,
    pub requested_at: String,
    pub expires_at: String,
    pub expires_at_ms: u64,
    pub holder_changed: bool,
    /// The class's kind now, when it is no longer the one of the request.
    pub kind_now_differs: bool,
    pub kind_now: &'static str,
    /// The checklist answers as words ("not answered" when none was given).
    pub holder_stopped: &'static str,
    pub double_run_acceptable: &'static str,
    pub statement: String,
    /// Advisory, and the answers say a double run is unsafe: only an incident commander may
    /// approve (docs/locks.md, "The advisory rule").
    pub unsafe_advisory: bool,
    /// Who the holder said it was at the request (`""`: not known).
    pub holder_who: String,
}

/// A checklist answer as a word.
pub fn answer_word(answer: i32) -> &'static str {
    match proto::ChecklistAnswer::try_from(answer) {
        Ok(proto::ChecklistAnswer::Yes) => "yes",
        Ok(proto::ChecklistAnswer::No) => "no",
        Ok(proto::ChecklistAnswer::Unknown) => "unknown",
        _ => "not answered",
    }
}

impl PendingView {
    pub fn of(request: &proto::ForceReleaseInfo) -> PendingView {
        let fenced_now = request.fenced_now.unwrap_or(request.fenced);
        let checklist = request.checklist.clone().unwrap_or_default();
        PendingView {
            id: request.id,
            href: key_href(&request.namespace, &request.key),
            namespace: request.namespace.clone(),
            key: request.key.clone(),
            holder_session_id: request.holder_session_id,
            token: request.token,
            requester: request.requester.clone(),
            requester_roles: crate::audit_report::role_words(&request.requester_roles),
            reason: request.reason.clone(),
            revoke_session: request.revoke_session,
            fenced: request.fenced,
            kind: kind_word(request.fenced),
            safety: request.safety.clone(),
            requested_at: utc(request.requested_at_ms),
            expires_at: utc(request.expires_at_ms),
            expires_at_ms: request.expires_at_ms,
            holder_changed: request.holder_changed,
            kind_now_differs: fenced_now != request.fenced,
            kind_now: kind_word(fenced_now),
            holder_stopped: answer_word(checklist.holder_stopped),
            double_run_acceptable: answer_word(checklist.double_run_acceptable),
            statement: checklist.statement.clone(),
            unsafe_advisory: !request.fenced && {
                let yes = proto::ChecklistAnswer::Yes as i32;
                let answered =
                    checklist.holder_stopped != 0 || checklist.double_run_acceptable != 0;
                answered
                    && checklist.holder_stopped != yes
                    && checklist.double_run_acceptable != yes
            },
            holder_who: request
                .holder_identity
                .as_ref()
                .map_or_else(String::new, |i| {
                    format!(
                        "{} on {} (pid {}{})",
                        i.name,
                        i.host,
                        i.pid,
                        if i.principal.is_empty() {
                            String::new()
                        } else {
                            format!(", principal {}", i.principal)
                        }
                    )
                }),
        }
    }
}

/// Everything the key page shows.
pub struct KeyView {
    pub namespace: String,
    pub key: String,
    pub revision: u64,
    pub class: ClassView,
    pub mode: &'static str,
    pub held: bool,
    pub holders: Vec<HolderView>,
    pub queue_depth: u64,
    pub waiters: Vec<WaiterView>,
    /// `""` for a free key.
    pub floor: String,
    pub pending: Vec<PendingView>,
    /// The token the request form starts with: the oldest holder's.
    pub default_token: u64,
    /// Shared holders granted together share a token: the form must then name the session.
    pub needs_session: bool,
}

impl KeyView {
    pub fn of(info: &proto::KeyInfo) -> KeyView {
        let mut holds: Vec<&proto::HoldInfo> = info.holders.iter().collect();
        if holds.is_empty() {
            holds.extend(info.holder.as_ref());
        }
        let holders: Vec<HolderView> = holds.iter().map(|h| HolderView::of(h)).collect();
        let default_token = holders.first().map_or(0, |h| h.token);
        let needs_session = holders.iter().filter(|h| h.token == default_token).count() > 1;
        KeyView {
            namespace: info.namespace.clone(),
            key: info.key.clone(),
            revision: info.revision,
            class: ClassView::of(&info.class.clone().unwrap_or_default()),
            mode: mode_word(info.mode),
            held: !holders.is_empty(),
            holders,
            queue_depth: info.queue_depth,
            waiters: info.waiters.iter().map(WaiterView::of).collect(),
            floor: info.floor.map(|f| f.to_string()).unwrap_or_default(),
            pending: info
                .pending_force_releases
                .iter()
                .map(PendingView::of)
                .collect(),
            default_token,
            needs_session,
        }
    }
}

/// `/console/keys/NS/KEY`, each key segment percent-encoded.
pub fn key_href(namespace: &str, key: &str) -> String {
    format!(
        "/console/keys/{}/{}",
        encode_path(namespace).replace('/', "%2F"),
        encode_path(key)
    )
}

/// Percent-encodes everything but unreserved characters and `/` (keys are paths).
pub fn encode_path(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_past_its_threshold_says_by_how_much() {
        let hold = proto::HoldInfo {
            token: 7,
            held_for_ms: 900_000,
            hold_ms_max_expected: 600_000,
            session_ttl_ms: 10_000,
            session_remaining_ms: Some(8_000),
            ..Default::default()
        };
        let view = HolderView::of(&hold);
        assert_eq!(view.over, "over the class's 10 min 0 s by 5 min 0 s");
        assert_eq!(
            view.renewed,
            "last renewed 2 s ago, expires in 8 s unless renewed"
        );
    }

    #[test]
    fn shared_holders_with_one_token_need_the_session_named() {
        let hold = |session_id| proto::HoldInfo {
            session_id,
            token: 9,
            ..Default::default()
        };
        let info = proto::KeyInfo {
            holders: vec![hold(1), hold(2)],
            ..Default::default()
        };
        let view = KeyView::of(&info);
        assert!(view.needs_session && view.held);
        assert_eq!(view.default_token, 9);
    }

    #[test]
    fn key_paths_are_encoded_but_keep_their_slashes() {
        assert_eq!(
            key_href("orders", "order/17 a?"),
            "/console/keys/orders/order/17%20a%3F"
        );
    }
}
