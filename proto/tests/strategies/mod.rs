//! proptest strategies for core values. Values are structurally arbitrary (not necessarily a
//! state the machine could reach): conversions must be lossless for any of them.
#![allow(dead_code)]

use std::collections::BTreeSet;

use picket_core::locks::{
    AcquireReply, Actor, AuditAction, AuditRecord, ClassSpec, Command, Event, EventKind,
    ForceReleaseId, ForceReleaseRequest, HoldInfo, HoldSnapshot, Identity, KeyInfo, LockConfig,
    LockMode, LockSnapshot, LockSnapshotEntry, LostHold, PermitSlot, ReleaseCause, Remembered,
    RememberedReply, Reply, RequestId, RequestTarget, Revision, Role, SecretHash,
    SemaphoreSnapshot, SessionId, SessionProof, SessionSnapshot, Token, Wait, WaiterInfo,
    WaiterSnapshot,
};
use picket_core::time::Instant;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

pub fn text() -> impl Strategy<Value = String> {
    "[a-z0-9/é -]{0,12}"
}

pub fn session() -> impl Strategy<Value = SessionId> {
    any::<u64>().prop_map(SessionId)
}

pub fn token() -> impl Strategy<Value = Token> {
    any::<u64>().prop_map(Token)
}

pub fn instant() -> impl Strategy<Value = Instant> {
    any::<u64>().prop_map(Instant::from_millis)
}

pub fn identity() -> impl Strategy<Value = Identity> {
    (text(), text(), any::<u32>(), text()).prop_map(|(name, host, pid, principal)| Identity {
        name,
        host,
        pid,
        principal,
    })
}

pub fn role() -> impl Strategy<Value = Role> {
    prop_oneof![
        Just(Role::OnCall),
        Just(Role::IncidentCommander),
        Just(Role::ClassAdmin)
    ]
}

pub fn roles() -> impl Strategy<Value = BTreeSet<Role>> {
    vec(role(), 0..4).prop_map(|roles| roles.into_iter().collect())
}

pub fn lost_hold() -> impl Strategy<Value = LostHold> {
    (text(), text(), token(), any::<u64>(), any::<u64>()).prop_map(
        |(namespace, key, token, revision, request)| LostHold {
            namespace: namespace.into(),
            key: key.into(),
            token,
            revision: Revision(revision),
            request: ForceReleaseId(request),
        },
    )
}

pub fn actor() -> impl Strategy<Value = Actor> {
    (text(), vec(role(), 0..4)).prop_map(|(principal, roles)| Actor {
        principal,
        roles: roles.into_iter().collect::<BTreeSet<_>>(),
    })
}

pub fn class() -> impl Strategy<Value = ClassSpec> {
    (
        (text(), text(), any::<bool>()),
        (any::<u64>(), any::<u64>(), any::<u64>()),
        (text(), text(), text()),
    )
        .prop_map(
            |((name, prefix, fenced), (ttl_default, ttl_max, hold), (owner, runbook, desc))| {
                ClassSpec {
                    name,
                    prefix,
                    fenced,
                    session_ttl_ms_default: ttl_default,
                    session_ttl_ms_max: ttl_max,
                    hold_ms_max_expected: hold,
                    owner,
                    runbook_url: runbook,
                    description: desc,
                }
            },
        )
}

pub fn secret_hash() -> impl Strategy<Value = Option<SecretHash>> {
    option::of(any::<[u8; 32]>().prop_map(SecretHash))
}

/// A proof as records hold it: legacy (no hash, no principal) or a hash and a principal.
pub fn proof() -> impl Strategy<Value = SessionProof> {
    prop_oneof![
        Just(SessionProof::legacy()),
        (any::<[u8; 32]>(), text()).prop_map(|(h, p)| SessionProof::new(SecretHash(h), &p)),
    ]
}

pub fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (option::of(any::<u64>()), identity(), secret_hash()).prop_map(
            |(ttl_ms, identity, secret_hash)| Command::CreateSession {
                ttl_ms,
                identity,
                secret_hash
            }
        ),
        (session(), proof()).prop_map(|(session, proof)| Command::CloseSession { session, proof }),
        vec(session(), 0..4).prop_map(|sessions| Command::ExpireSessions { sessions }),
        (
            session(),
            any::<u64>(),
            text(),
            text(),
            (any::<bool>(), option::of(any::<u64>()), mode()),
            proof()
        )
            .prop_map(
                |(session, request, namespace, key, (wait, wait_timeout_ms, mode), proof)| {
                    Command::Acquire {
                        session,
                        proof,
                        request: RequestId(request),
                        namespace,
                        key,
                        mode,
                        wait: wait.then_some(Wait {
                            timeout_ms: wait_timeout_ms,
                        }),
                    }
                }
            ),
        (session(), text(), text(), proof()).prop_map(|(session, namespace, key, proof)| {
            Command::CancelWait {
                session,
                proof,
                namespace,
                key,
            }
        }),
        Just(Command::ExpireWaits),
        (session(), any::<u64>(), text(), text(), token(), proof()).prop_map(
            |(session, request, namespace, key, token, proof)| Command::Release {
                session,
                proof,
                request: RequestId(request),
                namespace,
                key,
                token
            }
        ),
        (actor(), text(), text(), any::<u32>(), text()).prop_map(
            |(actor, namespace, key, permits, reason)| Command::SetSemaphore {
                actor,
                namespace,
                key,
                permits,
                reason
            }
        ),
        (actor(), text(), class()).prop_map(|(actor, namespace, class)| Command::PutClass {
            actor,
            namespace,
            class
        }),
        (actor(), text(), text()).prop_map(|(actor, namespace, prefix)| Command::RemoveClass {
            actor,
            namespace,
            prefix
        }),
        actor().prop_map(|actor| Command::RecordSnapshotSave { actor }),
        (
            actor(),
            text(),
            text(),
            token(),
            option::of(session()),
            (text(), any::<bool>(), checklist())
        )
            .prop_map(
                |(
                    actor,
                    namespace,
                    key,
                    expected_token,
                    holder,
                    (reason, revoke_session, checklist),
                )| {
                    Command::RequestForceRelease {
                        actor,
                        namespace,
                        key,
                        expected_token,
                        holder,
                        reason,
                        revoke_session,
                        checklist,
                    }
                }
            ),
        (actor(), any::<u64>(), any::<bool>()).prop_map(|(actor, id, acknowledged_fenced)| {
            Command::ApproveForceRelease {
                actor,
                id: ForceReleaseId(id),
                acknowledged_fenced,
            }
        }),
        (actor(), any::<u64>(), text()).prop_map(|(actor, id, reason)| {
            Command::DenyForceRelease {
                actor,
                id: ForceReleaseId(id),
                reason,
            }
        }),
    ]
}

pub fn acquire_reply() -> impl Strategy<Value = AcquireReply> {
    prop_oneof![
        (token(), option::of(any::<u32>())).prop_map(|(token, slot)| AcquireReply::Granted {
            token,
            permit: slot.map(PermitSlot)
        }),
        any::<u32>().prop_map(|position| AcquireReply::Queued { position }),
        (session(), token()).prop_map(|(holder, token)| AcquireReply::Busy { holder, token }),
    ]
}

fn next() -> impl Strategy<Value = Option<(SessionId, Token)>> {
    option::of((session(), token()))
}

pub fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        (session(), any::<u64>())
            .prop_map(|(session, ttl_ms)| Reply::SessionCreated { session, ttl_ms }),
        (0..1_000_000usize, 0..1_000_000usize).prop_map(|(holds_released, waits_removed)| {
            Reply::SessionClosed {
                holds_released,
                waits_removed,
            }
        }),
        vec(session(), 0..4).prop_map(|expired| Reply::SessionsExpired { expired }),
        acquire_reply().prop_map(Reply::Acquire),
        (token(), next()).prop_map(|(token, next)| Reply::Released { token, next }),
        any::<bool>().prop_map(|replaced| Reply::ClassPut { replaced }),
        Just(Reply::ClassRemoved),
        (any::<u64>(), any::<bool>(), instant()).prop_map(|(id, fenced, expires_at)| {
            Reply::ForceReleaseRequested {
                id: ForceReleaseId(id),
                fenced,
                safety: ClassSpec::safety_statement(fenced),
                expires_at,
            }
        }),
        (
            any::<u64>(),
            token(),
            next(),
            option::of(session()),
            any::<bool>()
        )
            .prop_map(|(floor, released_token, next, session_revoked, fenced)| {
                Reply::ForceReleaseApproved {
                    floor: Revision(floor),
                    released_token,
                    next,
                    session_revoked,
                    fenced,
                }
            }),
        Just(Reply::ForceReleaseDenied),
        (any::<bool>(), option::of(token()))
            .prop_map(|(removed, held)| Reply::WaitCancelled { removed, held }),
        (0..1_000usize).prop_map(|removed| Reply::WaitsExpired { removed }),
        any::<u32>().prop_map(|previous_permits| Reply::SemaphoreSet { previous_permits }),
        Just(Reply::SnapshotSaveRecorded),
    ]
}

pub fn remembered_reply() -> impl Strategy<Value = RememberedReply> {
    prop_oneof![
        acquire_reply().prop_map(RememberedReply::Acquire),
        (token(), next()).prop_map(|(token, next)| RememberedReply::Released { token, next }),
    ]
}

fn cause() -> impl Strategy<Value = ReleaseCause> {
    prop_oneof![
        Just(ReleaseCause::Released),
        Just(ReleaseCause::SessionClosed),
        Just(ReleaseCause::SessionExpired),
        Just(ReleaseCause::SessionRevoked),
        Just(ReleaseCause::WaitExpired),
        Just(ReleaseCause::WaitCancelled),
    ]
}

pub fn event() -> impl Strategy<Value = Event> {
    let kind = prop_oneof![
        (session(), token(), mode(), option::of(any::<u32>())).prop_map(
            |(session, token, mode, slot)| EventKind::Granted {
                session,
                token,
                mode,
                permit: slot.map(PermitSlot)
            }
        ),
        (any::<u32>(), any::<u32>()).prop_map(|(permits, previous_permits)| {
            EventKind::SemaphoreChanged {
                permits,
                previous_permits,
            }
        }),
        (session(), any::<u32>())
            .prop_map(|(session, position)| EventKind::Queued { session, position }),
        (session(), token(), cause()).prop_map(|(session, token, cause)| EventKind::Released {
            session,
            token,
            cause
        }),
        (session(), cause()).prop_map(|(session, cause)| EventKind::WaitRemoved { session, cause }),
        (session(), token(), any::<u64>(), any::<bool>()).prop_map(
            |(session, token, request, session_revoked)| EventKind::ForceReleased {
                session,
                token,
                request: ForceReleaseId(request),
                session_revoked,
            }
        ),
        (text(), any::<bool>())
            .prop_map(|(class, removed)| EventKind::ClassChanged { class, removed }),
    ];
    (
        any::<u64>(),
        instant(),
        text(),
        text(),
        kind,
        option::of(identity()),
    )
        .prop_map(|(revision, time, namespace, key, kind, identity)| Event {
            revision: Revision(revision),
            time,
            namespace: namespace.into(),
            key: key.into(),
            kind,
            identity: identity.map(std::sync::Arc::new),
        })
}

fn audit_action() -> impl Strategy<Value = AuditAction> {
    prop_oneof![
        Just(AuditAction::ForceReleaseRequested),
        Just(AuditAction::ForceReleaseApproved),
        Just(AuditAction::ForceReleaseDenied),
        Just(AuditAction::ForceReleaseExpired),
        Just(AuditAction::SessionRevoked),
        Just(AuditAction::ClassPut),
        Just(AuditAction::ClassRemoved),
        Just(AuditAction::SemaphoreSet),
        Just(AuditAction::MembershipChanged),
    ]
}

pub fn audit_record() -> impl Strategy<Value = AuditRecord> {
    (
        (any::<u64>(), instant(), text(), audit_action()),
        (
            text(),
            text(),
            option::of(token()),
            option::of(any::<bool>()),
        ),
        (option::of(session()), option::of(any::<u64>()), text()),
        (roles(), text(), roles()),
        (option::of(any::<u64>()), next(), option::of(any::<bool>())),
        (
            option::of((any::<u32>(), any::<u32>())),
            option::of(any::<u32>()),
            text(),
        ),
        (option::of(checklist()), option::of(identity())),
    )
        .prop_map(
            |(
                (revision, time, actor, action),
                (namespace, key, token, fenced),
                (s, r, reason),
                (actor_roles, requester, requester_roles),
                (floor, next, revoke_session),
                (permits, slot, membership),
                (checklist, holder),
            )| {
                AuditRecord {
                    revision: Revision(revision),
                    time,
                    actor,
                    action,
                    namespace,
                    key,
                    token,
                    fenced,
                    session: s,
                    request: r.map(ForceReleaseId),
                    reason,
                    actor_roles,
                    requester,
                    requester_roles,
                    floor: floor.map(Revision),
                    next,
                    revoke_session,
                    permits,
                    permit: slot.map(PermitSlot),
                    membership,
                    checklist,
                    holder,
                }
            },
        )
}

pub fn force_release() -> impl Strategy<Value = ForceReleaseRequest> {
    (
        (any::<u64>(), text(), text(), session(), token()),
        (text(), text(), any::<bool>(), any::<bool>()),
        (instant(), instant(), roles()),
        (checklist(), identity()),
    )
        .prop_map(
            |(
                (id, namespace, key, holder, token),
                (requester, reason, revoke_session, fenced),
                (requested_at, expires_at, requester_roles),
                (checklist, holder_identity),
            )| ForceReleaseRequest {
                id: ForceReleaseId(id),
                namespace,
                key,
                holder,
                token,
                requester,
                requester_roles,
                reason,
                revoke_session,
                checklist,
                holder_identity,
                fenced,
                safety: ClassSpec::safety_statement(fenced),
                requested_at,
                expires_at,
            },
        )
}

pub fn hold_info() -> impl Strategy<Value = HoldInfo> {
    (
        (text(), text(), session(), identity(), token()),
        (
            instant(),
            any::<u64>(),
            any::<u64>(),
            option::of(any::<u64>()),
            any::<u64>(),
        ),
        (mode(), option::of(any::<u32>())),
    )
        .prop_map(
            |(
                (namespace, key, session, identity, token),
                (granted_at, held, ttl, rem, hold),
                (mode, slot),
            )| {
                HoldInfo {
                    namespace,
                    key,
                    session,
                    identity,
                    token,
                    permit: slot.map(PermitSlot),
                    granted_at,
                    held_for_ms: held,
                    session_ttl_ms: ttl,
                    session_remaining_ms: rem,
                    hold_ms_max_expected: hold,
                    mode,
                }
            },
        )
}

pub fn mode() -> impl Strategy<Value = LockMode> {
    prop_oneof![
        Just(LockMode::Exclusive),
        Just(LockMode::Shared),
        Just(LockMode::Permit)
    ]
}

pub fn key_info() -> impl Strategy<Value = KeyInfo> {
    let waiter = (
        session(),
        identity(),
        any::<u32>(),
        instant(),
        any::<u64>(),
        mode(),
    )
        .prop_map(
            |(session, identity, position, queued_at, waiting_for_ms, mode)| WaiterInfo {
                session,
                identity,
                position,
                queued_at,
                waiting_for_ms,
                mode,
            },
        );
    (
        (any::<u64>(), text(), text(), class()),
        (vec(hold_info(), 0..3), 0..10_000usize, vec(waiter, 0..3)),
        (option::of(any::<u64>()), vec(force_release(), 0..2)),
        (
            option::of(any::<u32>()),
            vec((any::<u32>(), any::<u64>()), 0..3),
        ),
    )
        .prop_map(
            |(
                (revision, namespace, key, class),
                (holders, depth, waiters),
                (floor, pending),
                (permits, slot_floors),
            )| {
                // As the state machine answers: `holder` is the first of `holders`, and a held
                // key has a mode.
                let holder = holders.first().cloned();
                let mode = holder.as_ref().map(|h| h.mode);
                KeyInfo {
                    revision: Revision(revision),
                    namespace,
                    key,
                    class,
                    holder,
                    queue_depth: depth,
                    waiters,
                    floor: floor.map(Revision),
                    pending_force_releases: pending,
                    holders,
                    mode,
                    permits,
                    permit_floors: slot_floors
                        .into_iter()
                        .map(|(slot, floor)| (PermitSlot(slot), Revision(floor)))
                        .collect(),
                }
            },
        )
}

pub fn config() -> impl Strategy<Value = LockConfig> {
    (
        (any::<u64>(), any::<u64>(), any::<u64>(), 0..1_000_000usize),
        (0..1_000_000usize, 0..1_000_000usize, 0..100usize),
        (0..10_000usize, 0..10_000usize, any::<u64>()),
        (0..1_000_000usize, 0..1_000_000usize),
    )
        .prop_map(
            |(
                (min, max, default, sessions),
                (holds, waiters, dedup),
                (classes, frs, fr_ttl),
                (audit, watch),
            )| {
                LockConfig {
                    session_ttl_ms_min: min,
                    session_ttl_ms_max: max,
                    session_ttl_ms_default: default,
                    sessions_max: sessions,
                    holds_per_session_max: holds,
                    waiters_per_key_max: waiters,
                    dedup_window: dedup,
                    classes_per_namespace_max: classes,
                    force_releases_pending_max: frs,
                    force_release_ttl_ms: fr_ttl,
                    audit_retention: audit,
                    watch_retention: watch,
                }
            },
        )
}

pub fn snapshot() -> impl Strategy<Value = LockSnapshot> {
    let session_snapshot = (
        (session(), identity(), any::<u64>(), instant()),
        (
            option::of(any::<u64>()),
            vec(
                (
                    any::<u64>(),
                    remembered_reply(),
                    option::of((text(), text(), option::of(mode()))),
                ),
                0..3,
            ),
            (secret_hash(), vec(lost_hold(), 0..3)),
        ),
    )
        .prop_map(
            |((id, identity, ttl_ms, created_at), (newest, replies, (secret_hash, holds_lost)))| {
                SessionSnapshot {
                    id,
                    identity,
                    secret_hash,
                    ttl_ms,
                    created_at,
                    request_newest: newest.map(RequestId),
                    replies: replies
                        .into_iter()
                        .map(|(r, reply, target)| Remembered {
                            request: RequestId(r),
                            reply,
                            target: target.map(|(namespace, key, mode)| RequestTarget {
                                namespace,
                                key,
                                mode,
                            }),
                        })
                        .collect(),
                    holds_lost,
                }
            },
        );
    let lock = (
        (
            text(),
            text(),
            vec(
                (session(), token(), instant(), option::of(any::<u32>())),
                1..3,
            ),
            mode(),
        ),
        (
            vec((session(), instant(), option::of(instant()), mode()), 0..3),
            any::<u64>(),
        ),
    )
        .prop_map(
            |((namespace, key, holders, mode), (waiters, floor))| LockSnapshotEntry {
                namespace,
                key,
                mode,
                holders: holders
                    .into_iter()
                    .map(|(session, token, granted_at, slot)| HoldSnapshot {
                        session,
                        token,
                        granted_at,
                        permit: slot.map(PermitSlot),
                    })
                    .collect(),
                waiters: waiters
                    .into_iter()
                    .map(|(session, queued_at, deadline, mode)| WaiterSnapshot {
                        session,
                        queued_at,
                        deadline,
                        mode,
                    })
                    .collect(),
                floor: Revision(floor),
            },
        );
    let semaphore = (
        text(),
        text(),
        any::<u32>(),
        any::<u64>(),
        vec((any::<u32>(), any::<u64>()), 0..3),
    )
        .prop_map(
            |(namespace, key, permits, set_at, floors)| SemaphoreSnapshot {
                namespace,
                key,
                permits,
                permits_set_at: Revision(set_at),
                floors: floors
                    .into_iter()
                    .map(|(slot, floor)| (PermitSlot(slot), Revision(floor)))
                    .collect(),
            },
        );
    (
        (config(), any::<u64>(), instant()),
        (vec(session_snapshot, 0..3), vec(lock, 0..3)),
        (vec((text(), class()), 0..3), vec(force_release(), 0..2)),
        (vec(audit_record(), 0..3), any::<u64>()),
        (vec(event(), 0..3), any::<u64>()),
        (vec(semaphore, 0..3), 0..4u32),
    )
        .prop_map(
            |(
                (config, revision, time),
                (sessions, locks),
                (classes, force_releases),
                (audit, audit_compacted),
                (events, events_compacted),
                (semaphores, cluster_version),
            )| LockSnapshot {
                config,
                revision: Revision(revision),
                time,
                sessions,
                locks,
                classes,
                force_releases,
                audit,
                audit_compacted_through: Revision(audit_compacted),
                events: events.into(),
                events_compacted_through: Revision(events_compacted),
                semaphores,
                cluster_version,
            },
        )
}

pub mod paxos {
    use picket_core::locks::LockSnapshot;
    use picket_core::node::{NodeCommand, ProposalId};
    use picket_core::paxos::{
        Ballot, MemberAddress, Membership, Message, NodeId, Schedule, Slot, Value,
    };
    use proptest::collection::vec;
    use proptest::option;
    use proptest::prelude::*;

    pub type Msg = Message<NodeCommand, LockSnapshot>;

    pub fn node_command() -> impl Strategy<Value = NodeCommand> {
        (any::<u64>(), any::<u64>(), any::<u64>(), super::command()).prop_map(
            |(origin, boot, proposal, command)| NodeCommand {
                origin: NodeId(origin),
                boot,
                proposal: ProposalId(proposal),
                command,
            },
        )
    }

    pub fn ballot() -> impl Strategy<Value = Ballot> {
        (any::<u64>(), any::<u64>()).prop_map(|(round, node)| Ballot::new(round, NodeId(node)))
    }

    pub fn slot() -> impl Strategy<Value = Slot> {
        any::<u64>().prop_map(Slot)
    }

    pub fn value() -> impl Strategy<Value = Value<NodeCommand>> {
        prop_oneof![
            Just(Value::Noop),
            (super::instant(), vec(node_command(), 0..3))
                .prop_map(|(stamp, commands)| Value::Batch { stamp, commands }),
            membership().prop_map(Value::Reconfig),
        ]
    }

    /// A valid membership: 1-5 voters and 0-3 learners out of nodes 1..=9.
    pub fn membership() -> impl Strategy<Value = Membership> {
        proptest::sample::subsequence((1..=9u64).collect::<Vec<_>>(), 1..=8).prop_flat_map(|ids| {
            let n = ids.len();
            (
                Just(ids),
                1..=n.min(5),
                any::<u16>(),
                super::text(),
                super::text(),
                (
                    proptest::option::of(super::instant()),
                    super::text(),
                    vec(10..20u64, 0..3),
                    0..4u32,
                ),
            )
                .prop_map(
                    |(
                        ids,
                        voters,
                        addressed,
                        actor,
                        reason,
                        (stamp, change, retired, cluster_version),
                    )| {
                        let addresses = ids
                            .iter()
                            .enumerate()
                            .filter(|(i, _)| addressed & (1 << i) != 0)
                            .map(|(_, id)| MemberAddress {
                                id: NodeId(*id),
                                peer: format!("10.0.0.{id}:7000"),
                                client: format!("10.0.0.{id}:7001"),
                                http: if id % 2 == 0 {
                                    format!("10.0.0.{id}:7002")
                                } else {
                                    String::new()
                                },
                            })
                            .collect();
                        Membership {
                            voters: ids[..voters].iter().copied().map(NodeId).collect(),
                            learners: ids[voters..].iter().copied().map(NodeId).collect(),
                            addresses,
                            actor,
                            reason,
                            actor_roles: vec!["class-admin".to_owned()],
                            change,
                            stamp,
                            retired: retired.into_iter().map(NodeId).collect(),
                            cluster_version,
                        }
                        .sorted()
                    },
                )
        })
    }

    /// A valid schedule: 1-3 memberships at rising slots.
    pub fn schedule() -> impl Strategy<Value = Schedule> {
        (vec(membership(), 1..=3), vec(1..1000u64, 3)).prop_map(|(ms, gaps)| {
            let mut from = 1u64;
            let entries = ms
                .into_iter()
                .zip(gaps)
                .map(|(m, gap)| {
                    let e = (Slot(from), m);
                    from += gap;
                    e
                })
                .collect();
            Schedule::from_entries(entries).expect("rising and valid")
        })
    }

    pub fn entry() -> impl Strategy<Value = (Slot, Ballot, Value<NodeCommand>)> {
        (1..u64::MAX, ballot(), value()).prop_map(|(s, b, v)| (Slot(s), b, v))
    }

    pub fn message() -> impl Strategy<Value = Msg> {
        prop_oneof![
            any::<u64>().prop_map(|round| Message::PreVote { round }),
            (any::<u64>(), any::<bool>())
                .prop_map(|(round, granted)| Message::PreVoteReply { round, granted }),
            (ballot(), slot(), any::<u64>()).prop_map(|(ballot, slot_from, incarnation)| {
                Message::Prepare {
                    ballot,
                    slot_from,
                    incarnation,
                }
            }),
            (ballot(), slot(), slot(), vec(entry(), 0..3)).prop_map(
                |(ballot, slot_applied, slot_snapshot, accepted)| Message::Promise {
                    ballot,
                    slot_applied,
                    slot_snapshot,
                    accepted
                }
            ),
            (ballot(), slot(), value(), slot(), any::<u64>()).prop_map(
                |(ballot, slot, value, slot_chosen, incarnation)| Message::Accept {
                    ballot,
                    slot,
                    value,
                    slot_chosen,
                    incarnation,
                }
            ),
            (ballot(), slot()).prop_map(|(ballot, slot)| Message::Accepted { ballot, slot }),
            (ballot(), ballot()).prop_map(|(ballot, promised)| Message::Nack { ballot, promised }),
            (ballot(), slot(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
                |(ballot, slot_chosen, seq, incarnation, lease_ms)| Message::Heartbeat {
                    ballot,
                    slot_chosen,
                    seq,
                    incarnation,
                    lease_ms,
                }
            ),
            (ballot(), any::<u64>(), slot(), any::<u64>()).prop_map(
                |(ballot, seq, applied, lease_ms)| Message::HeartbeatAck {
                    ballot,
                    seq,
                    applied,
                    lease_ms,
                }
            ),
            slot().prop_map(|slot_from| Message::CatchupRequest { slot_from }),
            (
                option::of((slot(), super::snapshot(), option::of(schedule()))),
                option::of(schedule()),
                vec((slot(), value()), 0..3)
            )
                .prop_map(|(snapshot, beside, entries)| {
                    // Without a snapshot, the schedule travels beside the entries.
                    let (snapshot, schedule) = match snapshot {
                        Some((slot, state, schedule)) => (Some((slot, state)), schedule),
                        None => (None, beside),
                    };
                    Message::CatchupReply {
                        snapshot,
                        schedule,
                        entries,
                    }
                }),
            any::<u64>().prop_map(|nonce| Message::RecoverQuery { nonce }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(nonce, incarnation, applied)| {
                Message::RecoverReply {
                    nonce,
                    incarnation,
                    slot_applied: Slot(applied),
                }
            }),
            (any::<u64>(), any::<u64>())
                .prop_map(|(nonce, incarnation)| Message::Fence { nonce, incarnation }),
            (any::<u64>(), ballot())
                .prop_map(|(nonce, promised)| Message::FenceAck { nonce, promised }),
        ]
    }
}

/// A force-release checklist: every answer, with or without a statement.
pub fn checklist() -> impl Strategy<Value = picket_core::locks::Checklist> {
    use picket_core::locks::{Checklist, ChecklistAnswer};
    let answer = prop_oneof![
        Just(ChecklistAnswer::Unanswered),
        Just(ChecklistAnswer::Yes),
        Just(ChecklistAnswer::No),
        Just(ChecklistAnswer::Unknown),
    ];
    (answer.clone(), answer, text()).prop_map(
        |(holder_stopped, double_run_acceptable, statement)| Checklist {
            holder_stopped,
            double_run_acceptable,
            statement,
        },
    )
}
