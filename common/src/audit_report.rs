//! The audit trail in words, JSON and CSV: one reading of `AuditRecord` for `picketctl audit`
//! and the console's audit page and exports, so both say the same about every record.

use std::fmt::Write as _;

use picket_proto::proto;
use serde_json::{json, Value};

use crate::wall_clock::utc;

/// What the record's action was, in the words both tools print.
pub fn action_words(action: i32) -> &'static str {
    match proto::AuditAction::try_from(action) {
        Ok(proto::AuditAction::ForceReleaseRequested) => "force-release requested",
        Ok(proto::AuditAction::ForceReleaseApproved) => "force-release approved",
        Ok(proto::AuditAction::ForceReleaseDenied) => "force-release denied",
        Ok(proto::AuditAction::ForceReleaseExpired) => "force-release expired",
        Ok(proto::AuditAction::SessionRevoked) => "session revoked",
        Ok(proto::AuditAction::ClassPut) => "class put",
        Ok(proto::AuditAction::ClassRemoved) => "class removed",
        Ok(proto::AuditAction::SemaphoreSet) => "semaphore set",
        Ok(proto::AuditAction::MembershipChanged) => "membership changed",
        Ok(proto::AuditAction::SnapshotSaved) => "backup saved",
        Ok(proto::AuditAction::ClusterVersionSet) => "cluster version set",
        _ => "unknown",
    }
}

/// Roles as words, comma-separated ("no role recorded" for a record written before roles were).
pub fn role_words(roles: &[i32]) -> String {
    let words: Vec<&str> = roles
        .iter()
        .map(|role| match proto::Role::try_from(*role) {
            // The role names of tokens, the console and docs/auth.md, one name per role.
            Ok(proto::Role::OnCall) => "picket-operator",
            Ok(proto::Role::IncidentCommander) => "picket-incident-commander",
            Ok(proto::Role::ClassAdmin) => "picket-admin",
            _ => "unknown",
        })
        .collect();
    if words.is_empty() {
        "no role recorded".to_owned()
    } else {
        words.join(", ")
    }
}

/// `fenced` or `advisory`.
pub fn kind_word(fenced: bool) -> &'static str {
    if fenced {
        "fenced"
    } else {
        "advisory"
    }
}

/// One record as JSON (`picketctl audit --json`, the console's JSON export).
pub fn record_json(r: &proto::AuditRecord) -> Value {
    json!({
        "revision": r.revision,
        "time_ms": r.time_ms,
        "time": utc(r.time_ms),
        "actor": r.actor,
        "actor_roles": role_words(&r.actor_roles),
        "action": action_words(r.action),
        "namespace": r.namespace,
        "key": r.key,
        "token": r.token,
        "fenced": r.fenced,
        "session_id": r.session_id,
        "force_release_id": r.force_release_id,
        "reason": r.reason,
        "requester": r.requester,
        "requester_roles": role_words(&r.requester_roles),
        "floor": r.floor,
        "next": r.next.as_ref().map(|g| json!({"session_id": g.session_id, "token": g.token})),
        "revoke_session": r.revoke_session,
        "previous_permits": r.previous_permits,
        "permits": r.permits,
        "slot": r.slot,
        "membership": r.membership,
        "holder": r.holder.as_ref().map(|h| json!({
            "name": h.name, "host": h.host, "pid": h.pid, "principal": h.principal,
        })),
        "checklist": r.checklist.as_ref().map(|c| json!({
            "holder_stopped": answer_words(c.holder_stopped),
            "double_run_acceptable": answer_words(c.double_run_acceptable),
            "statement": c.statement,
        })),
    })
}

/// A checklist answer in words.
pub fn answer_words(answer: i32) -> &'static str {
    match proto::ChecklistAnswer::try_from(answer) {
        Ok(proto::ChecklistAnswer::Yes) => "yes",
        Ok(proto::ChecklistAnswer::No) => "no",
        Ok(proto::ChecklistAnswer::Unknown) => "unknown",
        _ => "not answered",
    }
}

/// Who a released holder said it was: `name on host (pid N, principal P)`.
pub fn holder_words(h: &proto::Identity) -> String {
    let mut words = format!("{} on {} (pid {}", h.name, h.host, h.pid);
    if !h.principal.is_empty() {
        let _ = write!(words, ", principal {}", h.principal);
    }
    words.push(')');
    words
}

/// The whole answer as JSON: `compacted_through` and the records.
pub fn response_json(response: &proto::QueryAuditResponse) -> Value {
    json!({
        "compacted_through": response.compacted_through,
        "records": response.records.iter().map(record_json).collect::<Vec<_>>(),
    })
}

/// Who acted: the actor and their roles, or "nobody (log time)" for an expiry.
pub fn actor_words(r: &proto::AuditRecord) -> String {
    if r.actor.is_empty() {
        "nobody (log time)".to_owned()
    } else {
        format!("{} ({})", r.actor, role_words(&r.actor_roles))
    }
}

/// What the record says beyond its revision, time, action, key and actor, in words
/// ("request #40, requested by alice (picket-operator), token 31 of session 9, advisory, ...").
pub fn detail_words(r: &proto::AuditRecord) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(request) = r.force_release_id {
        parts.push(format!("request #{request}"));
    }
    if !r.requester.is_empty() && r.requester != r.actor {
        parts.push(format!(
            "requested by {} ({})",
            r.requester,
            role_words(&r.requester_roles)
        ));
    }
    match (r.token, r.session_id) {
        (Some(token), Some(session)) => parts.push(format!("token {token} of session {session}")),
        (Some(token), None) => parts.push(format!("token {token}")),
        (None, Some(session)) => parts.push(format!("session {session}")),
        (None, None) => {}
    }
    if let Some(slot) = r.slot {
        parts.push(format!("slot {slot}"));
    }
    if let Some(holder) = &r.holder {
        parts.push(format!("holder {}", holder_words(holder)));
    }
    if let Some(c) = &r.checklist {
        let mut words = format!(
            "checklist: holder stopped {}, double run acceptable {}",
            answer_words(c.holder_stopped),
            answer_words(c.double_run_acceptable)
        );
        if !c.statement.is_empty() {
            let _ = write!(words, ", statement {:?}", c.statement);
        }
        parts.push(words);
    }
    if r.action == proto::AuditAction::MembershipChanged as i32 && !r.membership.is_empty() {
        parts.push(format!("the membership is now {}", r.membership));
    }
    if let Some(fenced) = r.fenced {
        parts.push(kind_word(fenced).to_owned());
    }
    if let Some(floor) = r.floor {
        parts.push(format!("floor {floor}"));
    }
    match &r.next {
        Some(next) => parts.push(format!(
            "next holder session {} token {}",
            next.session_id, next.token
        )),
        None if r.floor.is_some() => parts.push("no next holder".to_owned()),
        None => {}
    }
    if let Some(revoke) = r.revoke_session {
        parts.push(format!(
            "revoke session: {}",
            if revoke { "yes" } else { "no" }
        ));
    }
    if r.action == proto::AuditAction::SemaphoreSet as i32 {
        let was = r.previous_permits.unwrap_or(0);
        let now = r.permits.unwrap_or(0);
        parts.push(match (was, now) {
            (0, n) => format!("declared with {n} permits"),
            (w, 0) => format!("removed (had {w} permits)"),
            (w, n) => format!("permits {w} -> {n}"),
        });
    }
    if !r.reason.is_empty() {
        parts.push(format!("reason {:?}", r.reason));
    }
    parts.join(", ")
}

/// One record as one line of text (`picketctl audit`).
pub fn record_line(r: &proto::AuditRecord) -> String {
    let mut line = format!(
        "rev {} {} {} {}/{} by {}",
        r.revision,
        utc(r.time_ms),
        action_words(r.action),
        r.namespace,
        r.key,
        actor_words(r)
    );
    let detail = detail_words(r);
    if !detail.is_empty() {
        let _ = write!(line, ", {detail}");
    }
    line
}

/// The CSV export's columns, in order.
pub const CSV_COLUMNS: [&str; 26] = [
    "revision",
    "time",
    "time_ms",
    "action",
    "namespace",
    "key",
    "actor",
    "actor_roles",
    "requester",
    "requester_roles",
    "force_release_id",
    "session_id",
    "token",
    "slot",
    "fenced",
    "floor",
    "next_session_id",
    "next_token",
    "revoke_session",
    "permits",
    "reason",
    "membership",
    "holder",
    "holder_stopped",
    "double_run_acceptable",
    "statement",
];

/// The records as CSV (RFC 4180, a header row, one row per record; absent values empty).
/// A text field that a spreadsheet would read as a formula (it starts with `=`, `+`, `-`, `@`,
/// a tab or a carriage return) is prefixed with `'`, so an export opened in one runs nothing.
pub fn csv(records: &[proto::AuditRecord]) -> String {
    let mut out = csv::Writer::from_writer(Vec::new());
    out.write_record(CSV_COLUMNS).expect("writing to memory");
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for r in records {
        let checklist = r.checklist.as_ref();
        let row: [String; 26] = [
            r.revision.to_string(),
            utc(r.time_ms),
            r.time_ms.to_string(),
            action_words(r.action).to_owned(),
            text_cell(&r.namespace),
            text_cell(&r.key),
            text_cell(&r.actor),
            role_words(&r.actor_roles),
            text_cell(&r.requester),
            if r.requester.is_empty() {
                String::new()
            } else {
                role_words(&r.requester_roles)
            },
            opt(r.force_release_id),
            opt(r.session_id),
            opt(r.token),
            opt(r.slot.map(u64::from)),
            r.fenced
                .map(|f| kind_word(f).to_owned())
                .unwrap_or_default(),
            opt(r.floor),
            opt(r.next.as_ref().map(|g| g.session_id)),
            opt(r.next.as_ref().map(|g| g.token)),
            r.revoke_session.map(|v| v.to_string()).unwrap_or_default(),
            opt(r.permits.map(u64::from)),
            text_cell(&r.reason),
            text_cell(&r.membership),
            r.holder
                .as_ref()
                .map(|h| text_cell(&holder_words(h)))
                .unwrap_or_default(),
            checklist
                .map(|c| answer_words(c.holder_stopped).to_owned())
                .unwrap_or_default(),
            checklist
                .map(|c| answer_words(c.double_run_acceptable).to_owned())
                .unwrap_or_default(),
            checklist
                .map(|c| text_cell(&c.statement))
                .unwrap_or_default(),
        ];
        out.write_record(&row).expect("writing to memory");
    }
    String::from_utf8(out.into_inner().expect("writing to memory")).expect("UTF-8 in, UTF-8 out")
}

/// A free-text cell, defused against spreadsheet formulas (see [`csv`]).
fn text_cell(text: &str) -> String {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> proto::AuditRecord {
        proto::AuditRecord {
            revision: 50,
            time_ms: 1_764_583_445_123,
            actor: "bob".into(),
            actor_roles: vec![proto::Role::IncidentCommander as i32],
            action: proto::AuditAction::ForceReleaseApproved as i32,
            namespace: "orders".into(),
            key: "invoice/42,\"a\"".into(),
            token: Some(31),
            fenced: Some(true),
            session_id: Some(9),
            force_release_id: Some(40),
            reason: "=HYPERLINK(\"x\")".into(),
            requester: "alice".into(),
            requester_roles: vec![proto::Role::OnCall as i32],
            floor: Some(50),
            next: None,
            revoke_session: Some(true),
            previous_permits: None,
            permits: None,
            slot: None,
            membership: String::new(),
            checklist: Some(proto::ForceReleaseChecklist {
                holder_stopped: proto::ChecklistAnswer::Unknown as i32,
                double_run_acceptable: proto::ChecklistAnswer::No as i32,
                statement: "idempotent per day".into(),
            }),
            holder: Some(proto::Identity {
                name: "ledger-writer".into(),
                host: "web-1".into(),
                pid: 4242,
                principal: "svc-ledger".into(),
            }),
        }
    }

    /// The review: the released holder's identity and the checklist shown to the approver are
    /// in every form of the record.
    #[test]
    fn a_release_record_names_the_holder_and_the_checklist() {
        let r = record();
        let line = record_line(&r);
        assert!(
            line.contains("holder ledger-writer on web-1 (pid 4242, principal svc-ledger)"),
            "{line}"
        );
        assert!(
            line.contains(
                "checklist: holder stopped unknown, double run acceptable no, statement \"idempotent per day\""
            ),
            "{line}"
        );
        let json = record_json(&r);
        assert_eq!(json["holder"]["pid"], 4242);
        assert_eq!(json["checklist"]["holder_stopped"], "unknown");
        assert_eq!(json["checklist"]["statement"], "idempotent per day");
        let text = csv(&[r]);
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .ends_with(",ledger-writer on web-1 (pid 4242 principal svc-ledger),unknown,no,idempotent per day")
                || text.contains("\"ledger-writer on web-1 (pid 4242, principal svc-ledger)\",unknown,no,idempotent per day"),
            "{text}"
        );
    }

    #[test]
    fn a_membership_record_says_what_the_membership_became() {
        let mut r = record();
        r.action = proto::AuditAction::MembershipChanged as i32;
        r.membership = "voters n1,n2,n3 learners n4".into();
        assert!(
            record_line(&r).contains("the membership is now voters n1,n2,n3 learners n4"),
            "{}",
            record_line(&r)
        );
        assert_eq!(record_json(&r)["membership"], "voters n1,n2,n3 learners n4");
    }

    #[test]
    fn csv_quotes_commas_and_quotes_and_defuses_formulas() {
        let text = csv(&[record()]);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(CSV_COLUMNS.join(",").as_str()));
        let row = lines.next().expect("one row");
        assert!(row.starts_with("50,2025-12-01T10:04:05.123Z,1764583445123,force-release approved,orders,\"invoice/42,\"\"a\"\"\",bob,picket-incident-commander,alice,picket-operator,40,9,31,,fenced,50,,,true,,"), "{row}");
        assert!(row.contains(",\"'=HYPERLINK(\"\"x\"\")\","), "{row}");
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn a_semaphore_record_says_what_its_permits_became() {
        let mut r = record();
        r.action = proto::AuditAction::SemaphoreSet as i32;
        r.force_release_id = None;
        r.requester.clear();
        r.token = None;
        r.session_id = None;
        r.fenced = None;
        r.floor = None;
        r.revoke_session = None;
        r.reason = "more workers".into();
        r.previous_permits = Some(2);
        r.permits = Some(4);
        let line = record_line(&r);
        assert!(line.contains("semaphore set orders/"), "{line}");
        assert!(
            line.ends_with(", permits 2 -> 4, reason \"more workers\""),
            "{line}"
        );
        r.previous_permits = Some(0);
        assert!(record_line(&r).contains("declared with 4 permits"));
        r.previous_permits = Some(4);
        r.permits = Some(0);
        assert!(record_line(&r).contains("removed (had 4 permits)"));
        assert_eq!(record_json(&r)["action"], "semaphore set");
        assert_eq!(record_json(&r)["previous_permits"], 4);
    }
}
