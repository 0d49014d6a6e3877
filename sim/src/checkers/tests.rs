//! Each checker fed a good history (no violation) and a bad one (the violation it exists for).

use super::*;
use crate::history::{
    DigestSeen, FinalReplica, GrantSeen, KeepAliveAcked, LeaderSeen, RecoverySeen, SessionGone,
    SyncedDamage, WriteAccepted,
};

fn grant(node: u64, boot: u64, revision: u64, key: &str) -> GrantSeen {
    GrantSeen {
        node,
        boot,
        revision,
        key: key.to_string(),
        token: revision,
        session: 1,
    }
}

fn write(key: &str, token: u64) -> WriteAccepted {
    WriteAccepted {
        key: key.to_string(),
        token,
        client: 1,
        at_ms: 0,
    }
}

fn good() -> History {
    History {
        grants: vec![
            grant(1, 1, 3, "ns/a"),
            grant(2, 1, 3, "ns/a"),
            grant(1, 1, 5, "ns/b"),
            grant(1, 1, 7, "ns/a"),
            // Node 1 restarted and replays: the same grants again.
            grant(1, 2, 3, "ns/a"),
            grant(1, 2, 7, "ns/a"),
        ],
        digests: vec![
            DigestSeen {
                node: 1,
                boot: 1,
                revision: 3,
                digest: 11,
            },
            DigestSeen {
                node: 2,
                boot: 1,
                revision: 3,
                digest: 11,
            },
            DigestSeen {
                node: 2,
                boot: 1,
                revision: 4,
                digest: 12,
            },
        ],
        writes: vec![
            write("ns/a", 3),
            write("ns/a", 3),
            write("ns/a", 7),
            write("ns/b", 5),
        ],
        acked: vec![
            AckedOp::Grant {
                key: "ns/a".into(),
                token: 3,
                session: 1,
            },
            AckedOp::Release {
                key: "ns/a".into(),
                token: 3,
            },
            AckedOp::Grant {
                key: "ns/a".into(),
                token: 7,
                session: 1,
            },
        ],
        keepalives: vec![KeepAliveAcked {
            session: 1,
            sent_at_ms: 1_000,
            ttl_ms: 2_000,
        }],
        sessions_gone: vec![SessionGone {
            session: 1,
            at_ms: 3_100,
            node: 1,
        }],
        sessions_closed: vec![],
        leaders: vec![],
        final_replicas: vec![FinalReplica {
            node: 1,
            revision: 9,
            events_from: 1,
            events: vec![
                (3, "ns/a".into(), FinalKind::Granted, 3),
                (4, "ns/a".into(), FinalKind::Released, 3),
                (7, "ns/a".into(), FinalKind::Granted, 7),
            ],
        }],
        healed_at_ms: Some(10_000),
        probe_granted_at_ms: Some(12_000),
        drift_bound_ppm: 10_000,
        liveness_bound_ms: 30_000,
        synced_damage: vec![SyncedDamage { node: 2, boot: 3 }],
        recoveries: vec![RecoverySeen {
            node: 2,
            boot: 3,
            outcome: "durable_state_lost".into(),
        }],
    }
}

/// A replica that restarts as an ordinary acceptor after a synced record of it was damaged has
/// forgotten an acknowledged acceptance (the cut-silently rule of issue 17).
#[test]
fn a_replica_restarting_normally_after_synced_damage_breaks_durability() {
    let mut h = good();
    h.recoveries[0].outcome = "torn_tail_cut".into();
    let found = check_all(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].checker, Checker::NoAckedLoss);
    assert!(found[0].detail.contains("node 2"), "{}", found[0].detail);
    // Never seen to start (it did not come back within the run): nothing to judge.
    let mut h = good();
    h.recoveries.clear();
    assert_eq!(check_all(&h), Vec::new());
}

#[test]
fn a_good_history_passes_every_checker() {
    assert_eq!(check_all(&good()), Vec::new());
}

#[test]
fn tokens_rise_catches_a_replica_reusing_a_token() {
    let mut h = good();
    // After a restart, node 1 grants `ns/a` with a token below the one before.
    h.grants.push(GrantSeen {
        token: 2,
        ..grant(1, 2, 9, "ns/a")
    });
    let found = tokens_rise(&h);
    assert!(!found.is_empty());
    assert!(found.iter().all(|v| v.checker == Checker::TokensRise));
}

#[test]
fn tokens_rise_catches_replicas_disagreeing_on_a_grant() {
    let mut h = good();
    h.grants.push(GrantSeen {
        token: 4,
        ..grant(3, 1, 3, "ns/a")
    });
    assert!(tokens_rise(&h)[0].detail.contains("revision 3"));
}

#[test]
fn fencing_catches_a_lower_token_after_a_higher_one() {
    let mut h = good();
    h.writes.push(write("ns/a", 3));
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].detail.contains("after token 7"));
}

#[test]
fn fencing_catches_a_token_never_granted() {
    let mut h = good();
    h.writes.push(write("ns/b", 6));
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].detail.contains("no replica granted"));
}

#[test]
fn applied_prefix_catches_a_mutated_digest() {
    let mut h = good();
    h.digests.push(DigestSeen {
        node: 3,
        boot: 1,
        revision: 4,
        digest: 13,
    });
    let found = applied_prefix(&h);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].checker, Checker::AppliedPrefix);
}

#[test]
fn no_acked_loss_catches_a_lost_release_and_a_short_log() {
    let mut h = good();
    h.final_replicas[0].events.remove(1);
    assert_eq!(no_acked_loss(&h).len(), 1);
    let mut h = good();
    h.final_replicas[0].revision = 5;
    assert!(no_acked_loss(&h)[0]
        .detail
        .contains("below acknowledged grant"));
    // Events compacted before the release's grant: nothing to say about it.
    let mut h = good();
    h.final_replicas[0].events.remove(1);
    h.final_replicas[0].events_from = 5;
    assert_eq!(no_acked_loss(&h), Vec::new());
}

#[test]
fn no_acked_loss_requires_a_caught_up_replica() {
    let mut h = good();
    h.final_replicas.clear();
    assert_eq!(no_acked_loss(&h).len(), 1);
}

#[test]
fn session_kept_catches_an_early_expiry() {
    let mut h = good();
    // Protected until 1_000 + 2_000 / 1.01 = 2_980 ms.
    h.sessions_gone[0].at_ms = 2_900;
    let found = session_kept(&h);
    assert_eq!(found.len(), 1);
    assert!(found[0].detail.contains("protected until 2980"));
    // Closed by its client: not an expiry.
    h.sessions_closed.push(1);
    assert_eq!(session_kept(&h), Vec::new());
}

#[test]
fn session_kept_catches_an_expiry_at_a_takeover_grace_that_missed_a_keepalive() {
    let mut h = good();
    // A new leader took over at 950 ms, before the keepalive was sent (a deposed leader
    // acknowledged it), and expired the session at its grace without it: a violation.
    h.sessions_gone[0].at_ms = 2_900;
    h.leaders.push(LeaderSeen {
        node: 2,
        at_ms: 950,
        observed_within_ms: 50,
    });
    assert_eq!(session_kept(&h).len(), 1);
}

#[test]
fn liveness_catches_a_late_or_missing_probe() {
    let mut h = good();
    h.probe_granted_at_ms = Some(50_000);
    assert_eq!(liveness(&h).len(), 1);
    h.probe_granted_at_ms = None;
    assert_eq!(liveness(&h).len(), 1);
    h.healed_at_ms = None;
    assert_eq!(liveness(&h), Vec::new());
}
