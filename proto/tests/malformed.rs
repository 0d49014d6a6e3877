//! A caller's malformed request is refused with INVALID_ARGUMENT, and the message and the
//! ErrorDetail name the field at fault. Malformed records name the field too.

use picket_core::locks::{Actor, Command, Role};
use picket_proto::convert::api::{AuditRead, InspectQuery, KeepAlive, ListHoldsQuery, WatchStart};
use picket_proto::convert::{decode_command, decode_lock_snapshot};
use picket_proto::status::error_detail;
use picket_proto::{proto, ConvertError};
use prost::Message as _;
use tonic::Code;

/// Asserts the status an error becomes, and that it names `field` (with `rule_part` in it).
fn assert_refused(error: ConvertError, field: &str, rule_part: &str) {
    assert_eq!(error.field, field, "{error}");
    assert!(error.rule.contains(rule_part), "{error}");
    let status = tonic::Status::from(error);
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with(&format!("{field}: ")),
        "{}",
        status.message()
    );
    let detail = error_detail(&status).expect("an ErrorDetail");
    assert_eq!(detail.rule, "invalid_argument");
    assert_eq!(detail.field, field);
}

fn acquire() -> proto::AcquireRequest {
    proto::AcquireRequest {
        session_id: 3,
        request_id: 1,
        namespace: "orders".into(),
        key: "invoice/42".into(),
        wait_ms: 0,
        session_secret: SECRET.to_vec(),
        wait_timeout_ms: 0,
        mode: 0,
    }
}

const SECRET: [u8; 32] = [0x5a; 32];

/// The lock-request conversions, for a caller authenticated as `alice`.
trait IntoCommand {
    fn convert(self) -> Result<Command, ConvertError>;
}

impl IntoCommand for proto::AcquireRequest {
    fn convert(self) -> Result<Command, ConvertError> {
        self.into_command("alice")
    }
}

impl IntoCommand for proto::ReleaseRequest {
    fn convert(self) -> Result<Command, ConvertError> {
        self.into_command("alice")
    }
}

fn into_command(request: impl IntoCommand) -> Result<Command, ConvertError> {
    request.convert()
}

fn operator() -> Actor {
    Actor::new("alice", &[Role::OnCall])
}

#[test]
fn a_good_acquire_converts() {
    let command = into_command(proto::AcquireRequest {
        wait_ms: 5_000,
        ..acquire()
    })
    .unwrap();
    assert!(matches!(command, Command::Acquire { wait: Some(_), .. }));
    let command = into_command(acquire()).unwrap();
    assert!(matches!(command, Command::Acquire { wait: None, .. }));
}

#[test]
fn every_call_on_a_session_needs_its_secret() {
    let missing = |error: ConvertError, field: &str| assert_refused(error, field, "required");
    let acquire_without = proto::AcquireRequest {
        session_secret: Vec::new(),
        ..acquire()
    };
    missing(
        into_command(acquire_without).unwrap_err(),
        "acquire.session_secret",
    );
    let release = proto::ReleaseRequest {
        session_id: 3,
        request_id: 2,
        namespace: "orders".into(),
        key: "k".into(),
        token: 9,
        session_secret: Vec::new(),
    };
    missing(into_command(release).unwrap_err(), "release.session_secret");
    let close = proto::CloseSessionRequest {
        session_id: 3,
        session_secret: Vec::new(),
    };
    missing(
        close.into_command("alice").unwrap_err(),
        "close_session.session_secret",
    );
    let keepalive = proto::KeepAliveRequest {
        session_id: 3,
        seq: 1,
        session_secret: Vec::new(),
    };
    missing(
        KeepAlive::parse(keepalive, "alice").unwrap_err(),
        "keep_alive.session_secret",
    );
    let short = proto::AcquireRequest {
        session_secret: vec![1; 15],
        ..acquire()
    };
    assert_refused(
        into_command(short).unwrap_err(),
        "acquire.session_secret",
        "15 bytes",
    );
    // The command carries the hash and the caller's principal, never the secret.
    let Command::Acquire { proof, .. } = into_command(acquire()).unwrap() else {
        panic!("not an acquire")
    };
    let hash = picket_proto::secret::SessionSecret::from_request(&SECRET, "s")
        .unwrap()
        .hash();
    assert_eq!(proof, picket_core::locks::SessionProof::new(hash, "alice"));
}

#[test]
fn a_session_secret_is_drawn_when_the_request_brings_none() {
    let request = proto::CreateSessionRequest {
        ttl_ms: None,
        identity: Some(proto::ClientIdentity {
            name: "billing".into(),
            host: "h".into(),
            pid: 1,
        }),
        session_secret: Vec::new(),
    };
    let (command, drawn) = request.clone().into_command("alice").unwrap();
    let drawn = drawn.expect("the server drew a secret");
    assert!(matches!(
        command,
        Command::CreateSession { secret_hash: Some(hash), .. } if hash == drawn.hash()
    ));
    let chosen = proto::CreateSessionRequest {
        session_secret: SECRET.to_vec(),
        ..request
    };
    let (command, drawn) = chosen.into_command("alice").unwrap();
    assert!(drawn.is_none());
    let hash = picket_proto::secret::SessionSecret::from_request(&SECRET, "s")
        .unwrap()
        .hash();
    assert!(matches!(
        command,
        Command::CreateSession { secret_hash: Some(h), .. } if h == hash
    ));
}

#[test]
fn bad_namespaces_are_named() {
    for bad in ["", "Orders", "-orders", "or_ders", &"a".repeat(64)] {
        let request = proto::AcquireRequest {
            namespace: bad.to_owned(),
            ..acquire()
        };
        let error = into_command(request).unwrap_err();
        assert_refused(error, "acquire.namespace", "[a-z0-9][a-z0-9-]{0,62}");
    }
}

#[test]
fn oversize_and_empty_keys_are_named() {
    let error = into_command(proto::AcquireRequest {
        key: "k".repeat(513),
        ..acquire()
    })
    .unwrap_err();
    assert_refused(error, "acquire.key", "513 bytes");
    let error = into_command(proto::ReleaseRequest {
        session_id: 3,
        request_id: 2,
        namespace: "orders".into(),
        key: String::new(),
        token: 9,
        session_secret: SECRET.to_vec(),
    })
    .unwrap_err();
    assert_refused(error, "release.key", "empty");
    let error = InspectQuery::try_from(proto::InspectRequest {
        namespace: "orders".into(),
        key: "x".repeat(600),
        allow_stale: false,
    })
    .unwrap_err();
    assert_refused(error, "inspect.key", "600 bytes");
}

#[test]
fn zero_ids_are_missing_ids() {
    let cases: Vec<(ConvertError, &str)> = vec![
        (
            into_command(proto::AcquireRequest {
                session_id: 0,
                ..acquire()
            })
            .unwrap_err(),
            "acquire.session_id",
        ),
        (
            into_command(proto::AcquireRequest {
                request_id: 0,
                ..acquire()
            })
            .unwrap_err(),
            "acquire.request_id",
        ),
        (
            into_command(proto::ReleaseRequest {
                session_id: 3,
                request_id: 2,
                namespace: "orders".into(),
                key: "k".into(),
                token: 0,
                session_secret: SECRET.to_vec(),
            })
            .unwrap_err(),
            "release.token",
        ),
        (
            proto::CloseSessionRequest {
                session_id: 0,
                session_secret: SECRET.to_vec(),
            }
            .into_command("alice")
            .unwrap_err(),
            "close_session.session_id",
        ),
        (
            KeepAlive::parse(
                proto::KeepAliveRequest {
                    session_id: 0,
                    seq: 1,
                    session_secret: SECRET.to_vec(),
                },
                "alice",
            )
            .unwrap_err(),
            "keep_alive.session_id",
        ),
        (
            proto::ApproveForceReleaseRequest {
                force_release_id: 0,
                acknowledged_fenced: true,
            }
            .into_command(operator())
            .unwrap_err(),
            "approve_force_release.force_release_id",
        ),
    ];
    for (error, field) in cases {
        assert_refused(error, field, "non-zero");
    }
}

#[test]
fn missing_required_messages_are_named() {
    let error = proto::CreateSessionRequest {
        ttl_ms: None,
        identity: None,
        session_secret: Vec::new(),
    }
    .into_command("svc")
    .unwrap_err();
    assert_refused(error, "create_session.identity", "required");

    let error = proto::PutClassRequest {
        namespace: "orders".into(),
        class: None,
    }
    .into_command(operator())
    .unwrap_err();
    assert_refused(error, "put_class.class", "required");
}

#[test]
fn session_identity_rules() {
    let identity = |name: &str, host: &str| proto::ClientIdentity {
        name: name.into(),
        host: host.into(),
        pid: 1,
    };
    let error = proto::CreateSessionRequest {
        ttl_ms: None,
        identity: Some(identity("", "h")),
        session_secret: Vec::new(),
    }
    .into_command("svc")
    .unwrap_err();
    assert_refused(error, "create_session.identity.name", "required");
    let error = proto::CreateSessionRequest {
        ttl_ms: None,
        identity: Some(identity("billing", &"h".repeat(300))),
        session_secret: Vec::new(),
    }
    .into_command("svc")
    .unwrap_err();
    assert_refused(error, "create_session.identity.host", "at most 256");
    let error = proto::CreateSessionRequest {
        ttl_ms: Some(0),
        identity: Some(identity("billing", "h")),
        session_secret: Vec::new(),
    }
    .into_command("svc")
    .unwrap_err();
    assert_refused(error, "create_session.ttl_ms", "non-zero");
    // The principal comes from authentication, never from the request.
    let command = proto::CreateSessionRequest {
        ttl_ms: Some(5_000),
        identity: Some(identity("billing", "h")),
        session_secret: Vec::new(),
    }
    .into_command("svc-billing")
    .unwrap()
    .0;
    let Command::CreateSession {
        identity, ttl_ms, ..
    } = command
    else {
        panic!("{command:?}")
    };
    assert_eq!(identity.principal, "svc-billing");
    assert_eq!(ttl_ms, Some(5_000));
}

#[test]
fn admin_request_rules() {
    let class = proto::ClassSpec {
        name: "Payments".into(),
        ..proto::ClassSpec::default()
    };
    let error = proto::PutClassRequest {
        namespace: "orders".into(),
        class: Some(class),
    }
    .into_command(operator())
    .unwrap_err();
    assert_refused(error, "put_class.class.name", "[a-z0-9]");

    let error = proto::RequestForceReleaseRequest {
        namespace: "orders".into(),
        key: "k".into(),
        expected_token: 7,
        reason: "  ".into(),
        revoke_session: true,
        holder_session_id: 0,
        checklist: None,
    }
    .into_command(operator())
    .unwrap_err();
    assert_refused(error, "request_force_release.reason", "required");

    let error = proto::DenyForceReleaseRequest {
        force_release_id: 4,
        reason: "r".repeat(2_000),
    }
    .into_command(operator())
    .unwrap_err();
    assert_refused(error, "deny_force_release.reason", "at most 1024");

    let error = ListHoldsQuery::try_from(proto::ListHoldsRequest {
        namespace: "orders".into(),
        limit: 1_000_000,
        allow_stale: false,
    })
    .unwrap_err();
    assert_refused(error, "list_holds.limit", "largest page");

    let error = AuditRead::try_from(proto::QueryAuditRequest {
        revision_min: 10,
        revision_max: Some(3),
        ..proto::QueryAuditRequest::default()
    })
    .unwrap_err();
    assert_refused(error, "query_audit.revision_max", "below revision_min");

    let error = WatchStart::try_from(proto::WatchRequest {
        namespace: Some("BAD".into()),
        key_prefix: String::new(),
        from_revision: 0,
        ..Default::default()
    })
    .unwrap_err();
    assert_refused(error, "watch.namespace", "[a-z0-9]");

    let error = into_command(proto::AcquireRequest {
        wait_ms: 24 * 3_600_000,
        ..acquire()
    })
    .unwrap_err();
    assert_refused(error, "acquire.wait_ms", "at most");

    // A wait timeout above 24 hours is refused at the edge, before anything reaches the log.
    let error = into_command(proto::AcquireRequest {
        wait_ms: 1_000,
        wait_timeout_ms: 24 * 3_600_000 + 1,
        ..acquire()
    })
    .unwrap_err();
    assert_refused(error, "acquire.wait_timeout_ms", "at most 86400000 ms");
    into_command(proto::AcquireRequest {
        wait_ms: 1_000,
        wait_timeout_ms: 24 * 3_600_000,
        ..acquire()
    })
    .expect("24 hours is allowed");
}

#[test]
fn unknown_enum_values_are_named() {
    let actor = |roles: Vec<i32>| proto::Command {
        kind: Some(proto::command::Kind::RemoveClass(
            proto::command::RemoveClass {
                actor: Some(proto::Actor {
                    principal: "alice".into(),
                    roles,
                }),
                namespace: "orders".into(),
                prefix: String::new(),
            },
        )),
    };
    let error = Command::try_from(actor(vec![1, 42])).unwrap_err();
    assert_refused(
        error,
        "remove_class.actor.roles[1]",
        "unknown enum value 42",
    );
    let error = Command::try_from(actor(vec![0])).unwrap_err();
    assert_refused(error, "remove_class.actor.roles[0]", "UNSPECIFIED");

    let record = proto::AuditRecord {
        action: 99,
        ..proto::AuditRecord::default()
    };
    let error = picket_core::locks::AuditRecord::try_from(record).unwrap_err();
    assert_refused(error, "action", "unknown enum value 99");

    let event = proto::Event {
        kind: Some(proto::event::Kind::Released(proto::event::Released {
            session_id: 1,
            token: 2,
            cause: 17,
        })),
        ..proto::Event::default()
    };
    let error = picket_core::locks::Event::try_from(event).unwrap_err();
    assert_refused(error, "kind.released.cause", "unknown enum value 17");
}

#[test]
fn malformed_records_name_the_path() {
    let error = decode_command(&proto::Command::default().encode_to_vec()).unwrap_err();
    assert_eq!(error.to_string(), "command.kind: required");

    let mut snapshot = proto::LockSnapshot::from(picket_core::locks::LockSnapshot {
        config: Default::default(),
        revision: picket_core::locks::Revision(3),
        time: picket_core::time::Instant::ZERO,
        sessions: vec![],
        locks: vec![],
        classes: vec![],
        force_releases: vec![],
        audit: vec![],
        audit_compacted_through: Default::default(),
        events: Default::default(),
        events_compacted_through: Default::default(),
        semaphores: vec![],
        cluster_version: 2,
    });
    snapshot.sessions.push(proto::SessionRecord::default());
    snapshot.sessions.push(proto::SessionRecord::default());
    snapshot.sessions[0].identity = Some(proto::Identity::default());
    let error = decode_lock_snapshot(&snapshot.encode_to_vec()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "lock_snapshot.sessions[1].identity: required"
    );
    snapshot.config = None;
    let error = decode_lock_snapshot(&snapshot.encode_to_vec()).unwrap_err();
    assert_eq!(error.to_string(), "lock_snapshot.config: required");
    let error = decode_lock_snapshot(&[0xff, 0xff, 0xff]).unwrap_err();
    assert!(matches!(error, picket_proto::DecodeError::Protobuf { .. }));
}
