//! `api_request_decode`: arbitrary bytes as one of the public API's requests (the first byte
//! chooses which), decoded with prost and validated into core types at the edge.
//!
//! Checked: never a panic; a refusal names a field under the request's name (it becomes
//! `INVALID_ARGUMENT: <field>: <rule>`); and what the edge accepts is well-formed for the state
//! machine: applied to a machine with a live session, an accepted command is never refused for a
//! bad name or text (`BadName`, `TextTooLong`, `TextEmpty`), and an accepted query's names are
//! accepted by the machine's queries. The machine's invariants hold afterwards.

use picket_core::locks::{
    Actor, Command, Identity, LockError, LockStateMachine, Outcome, Role, SessionId,
};
use picket_core::time::Instant;
use picket_proto::convert::api::{
    AuditRead, InspectQuery, KeepAlive, ListClassesQuery, ListHoldsQuery, WatchStart,
};
use picket_proto::{proto, ConvertError};
use prost::Message;

/// Number of request kinds the first byte chooses from.
pub const REQUESTS: u8 = 15;

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    let which = which % REQUESTS;
    let actor = || {
        Actor::new(
            "fuzz",
            &[Role::OnCall, Role::IncidentCommander, Role::ClassAdmin],
        )
    };
    let mut sm = machine();
    let command: Option<Result<Command, ConvertError>> = match which {
        0 => decode::<proto::CreateSessionRequest>(bytes)
            .map(|r| r.into_command("fuzz").map(|(command, _)| command)),
        1 => decode::<proto::CloseSessionRequest>(bytes).map(|r| r.into_command("fuzz")),
        2 => decode::<proto::AcquireRequest>(bytes).map(|r| r.into_command("fuzz")),
        3 => decode::<proto::ReleaseRequest>(bytes).map(|r| r.into_command("fuzz")),
        4 => decode::<proto::PutClassRequest>(bytes).map(|r| r.into_command(actor())),
        5 => decode::<proto::RemoveClassRequest>(bytes).map(|r| r.into_command(actor())),
        6 => decode::<proto::RequestForceReleaseRequest>(bytes).map(|r| r.into_command(actor())),
        7 => decode::<proto::ApproveForceReleaseRequest>(bytes).map(|r| r.into_command(actor())),
        8 => decode::<proto::DenyForceReleaseRequest>(bytes).map(|r| r.into_command(actor())),
        _ => None,
    };
    if let Some(command) = command {
        match command {
            Ok(command) => apply_accepted(&mut sm, command),
            Err(e) => check_refusal(&e),
        }
        return;
    }
    let now = sm.time();
    match which {
        9 => {
            if let Some(r) = decode::<proto::KeepAliveRequest>(bytes) {
                if let Err(e) = KeepAlive::parse(r, "fuzz") {
                    check_refusal(&e);
                }
            }
        }
        10 => {
            if let Some(r) = decode::<proto::WatchRequest>(bytes) {
                match WatchStart::try_from(r) {
                    Ok(w) => {
                        let _ = sm.watch(w.from, &w.filter, 16);
                    }
                    Err(e) => check_refusal(&e),
                }
            }
        }
        11 => {
            if let Some(r) = decode::<proto::InspectRequest>(bytes) {
                match InspectQuery::try_from(r) {
                    Ok(q) => {
                        let answer = sm.inspect(&q.namespace, &q.key, now);
                        assert!(answer.is_ok(), "accepted inspect refused: {answer:?}");
                    }
                    Err(e) => check_refusal(&e),
                }
            }
        }
        12 => {
            if let Some(r) = decode::<proto::ListHoldsRequest>(bytes) {
                match ListHoldsQuery::try_from(r) {
                    Ok(q) => {
                        assert!(q.limit >= 1, "list limit {}", q.limit);
                        let answer = sm.list_holds(&q.namespace, now, q.limit);
                        assert!(answer.is_ok(), "accepted list_holds refused: {answer:?}");
                    }
                    Err(e) => check_refusal(&e),
                }
            }
        }
        13 => {
            if let Some(r) = decode::<proto::ListClassesRequest>(bytes) {
                match ListClassesQuery::try_from(r) {
                    Ok(q) => {
                        let answer = sm.classes(&q.namespace);
                        assert!(answer.is_ok(), "accepted list_classes refused: {answer:?}");
                    }
                    Err(e) => check_refusal(&e),
                }
            }
        }
        _ => {
            if let Some(r) = decode::<proto::QueryAuditRequest>(bytes) {
                match AuditRead::try_from(r) {
                    Ok(q) => {
                        assert!(q.query.revision_min <= q.query.revision_max);
                        let _ = sm.audit(&q.query);
                    }
                    Err(e) => check_refusal(&e),
                }
            }
        }
    }
    sm.check_invariants();
}

fn decode<P: Message + Default>(bytes: &[u8]) -> Option<P> {
    P::decode(bytes).ok()
}

/// The secret of session 1 of [`machine`]: 16 zero bytes, easy for the fuzzer to find.
pub const SESSION_SECRET: [u8; 16] = [0; 16];

/// A machine with one live session (id 1, secret [`SESSION_SECRET`], principal `fuzz`), so
/// session-scoped commands get past `UnknownSession` and `SessionNotYours`.
fn machine() -> LockStateMachine {
    let mut sm = LockStateMachine::new(Default::default());
    let secret = picket_proto::secret::SessionSecret::from_request(&SESSION_SECRET, "secret")
        .expect("16 bytes is a valid secret");
    let created = sm.apply(
        Instant::from_millis(1),
        Command::CreateSession {
            secret_hash: Some(secret.hash()),
            ttl_ms: None,
            identity: Identity {
                name: "fuzz".into(),
                host: "h".into(),
                pid: 1,
                principal: "fuzz".into(),
            },
        },
    );
    assert!(
        matches!(created, Ok(picket_core::locks::Reply::SessionCreated { session, .. }) if session == SessionId(1)),
        "setup: {created:?}"
    );
    sm
}

fn check_refusal(e: &ConvertError) {
    assert!(!e.field.is_empty(), "refusal without a field: {e:?}");
    assert!(!e.rule.is_empty(), "refusal without a rule: {e:?}");
}

fn apply_accepted(sm: &mut LockStateMachine, command: Command) {
    let outcome: Outcome = sm.apply(Instant::from_millis(2), command.clone());
    if let Err(e) = &outcome {
        assert!(
            !matches!(
                e,
                LockError::BadName(_) | LockError::TextTooLong { .. } | LockError::TextEmpty { .. }
            ),
            "the edge accepted {command:?} but the state machine refused it: {e}"
        );
    }
    sm.check_invariants();
}
