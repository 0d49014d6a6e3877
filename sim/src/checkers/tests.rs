//! Each checker fed a good history (no violation) and a bad one (the violation it exists for).

use super::*;
use crate::history::{
    Asked, Attempt, CancelSeen, DigestSeen, FinalReplica, GrantAcked, GrantSeen, KeepAliveAcked,
    LeaderSeen, LogEvent, ReadSeen, RecoverySeen, Refused, SessionGone, SyncedDamage, WaitCause,
};

fn grant(node: u64, boot: u64, revision: u64, key: &str) -> GrantSeen {
    GrantSeen {
        node,
        boot,
        revision,
        key: key.to_string(),
        token: revision,
        session: 1,
        slot: None,
    }
}

fn write(key: &str, token: u64) -> Accepted {
    Accepted {
        key: key.to_string(),
        token,
        client: 1,
        at_ms: 0,
        access: Access::Write,
        slot: None,
    }
}

fn slot_write(key: &str, slot: u32, token: u64) -> Accepted {
    Accepted {
        slot: Some(slot),
        ..write(key, token)
    }
}

fn read(key: &str, token: u64) -> Accepted {
    Accepted {
        access: Access::Read,
        ..write(key, token)
    }
}

fn acked_grant(key: &str, token: u64, session: u64, mode: Mode) -> AckedOp {
    AckedOp::Grant {
        key: key.into(),
        token,
        session,
        mode,
    }
}

fn event(revision: u64, time_ms: u64, key: &str, session: u64, kind: LogKind) -> LogEvent {
    LogEvent {
        node: 1,
        boot: 1,
        revision,
        time_ms,
        key: key.to_string(),
        session,
        kind,
    }
}

fn attempt(session: u64, key: &str, ask: Ask, timeout_ms: Option<u64>) -> Attempt {
    Attempt {
        client: 1,
        session,
        key: key.to_string(),
        mode: Asked::Exclusive,
        ask,
        timeout_ms,
        outcome: Outcome::Failed,
        cancel: None,
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
        accepted: vec![
            write("ns/a", 3),
            write("ns/a", 3),
            write("ns/a", 7),
            write("ns/b", 5),
        ],
        acked: vec![
            acked_grant("ns/a", 3, 1, Mode::Exclusive),
            AckedOp::Release {
                key: "ns/a".into(),
                token: 3,
            },
            acked_grant("ns/a", 7, 1, Mode::Exclusive),
        ],
        grants_acked: vec![grant_acked(200, 3), grant_acked(400, 7)],
        // One before any grant, one after both: answered from revision 8.
        reads: vec![lin_read(100, 2), lin_read(450, 8)],
        log: Vec::new(),
        attempts: Vec::new(),
        semaphores: BTreeMap::new(),
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
        membership_failures: Vec::new(),
        refused: Vec::new(),
        sessions_opened: BTreeMap::new(),
        restores: Vec::new(),
    }
}

/// The restored revision of [`restored`]'s restore (the backup's revision 5 plus a bump).
const FLOOR: u64 = 1_000_005;

/// [`good`], then the whole cluster lost and restored from a backup at revision 5 (nodes 1 and
/// 2, node 1 at its third boot): session 1 of the old cluster, session `FLOOR + 1` of the new
/// one, which is granted `ns/a` at `FLOOR + 2` and writes with it.
fn restored() -> History {
    let mut h = good();
    h.restores.push(RestoreSeen {
        backup_revision: 5,
        floor: FLOOR,
        lost_at_ms: 19_000,
        restarted_at_ms: 20_000,
        boots_before: BTreeMap::from([(1, 2), (2, 1)]),
        acked_before: h.acked.len(),
        accepted_before: h.accepted.len(),
    });
    h.sessions_opened = BTreeMap::from([(1, 500), (FLOOR + 1, 21_000)]);
    h.grants.push(GrantSeen {
        session: FLOOR + 1,
        ..grant(1, 3, FLOOR + 2, "ns/a")
    });
    h.acked
        .push(acked_grant("ns/a", FLOOR + 2, FLOOR + 1, Mode::Exclusive));
    h.accepted.push(write("ns/a", FLOOR + 2));
    // The final replicas are the restored cluster's: its events only (the harness records
    // `events_from` 1 for every boot: the watcher reads from the oldest revision retained).
    h.final_replicas = vec![FinalReplica {
        node: 1,
        revision: FLOOR + 3,
        events_from: 1,
        events: vec![(FLOOR + 2, "ns/a".into(), FinalKind::Granted, FLOOR + 2)],
    }];
    h
}

#[test]
fn a_restore_above_every_old_token_passes_every_checker() {
    assert_eq!(check_all(&restored()), Vec::new());
}

/// Checker 4 judges only what the restored cluster acknowledged: the old cluster's grants and
/// releases are not in the restored state (docs/storage.md, "Restoring a backup"); one of the
/// restored cluster's is still judged.
#[test]
fn no_acked_loss_after_a_restore_judges_the_restored_cluster_only() {
    let mut h = restored();
    h.restores.clear();
    let found = no_acked_loss(&h);
    assert!(!found.is_empty(), "the old cluster's acks are missing");
    let mut h = restored();
    h.acked.push(AckedOp::Release {
        key: "ns/a".into(),
        token: FLOOR + 2,
    });
    let found = no_acked_loss(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].detail.contains("Released"), "{}", found[0].detail);
}

/// A restore without the bump: the restored cluster grants `ns/a` token 6, below token 7 the
/// old cluster granted after the backup (revision 5).
#[test]
fn no_rewind_catches_a_restored_token_at_or_below_an_old_one() {
    let mut h = restored();
    h.grants.push(GrantSeen {
        session: FLOOR + 1,
        ..grant(2, 2, 7, "ns/a")
    });
    let found = no_rewind(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].checker, Checker::NoRewind);
    assert!(found[0].detail.contains("token 7"), "{}", found[0].detail);
    // Acknowledged to a session of the restored cluster: the same.
    let mut h = restored();
    h.acked
        .push(acked_grant("ns/b", 5, FLOOR + 1, Mode::Exclusive));
    let found = no_rewind(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].detail.contains("`ns/b`"), "{}", found[0].detail);
}

/// The clients carry on: a grant acknowledged to a session opened on the restored cluster.
#[test]
fn no_rewind_requires_a_grant_after_the_restore() {
    let mut h = restored();
    h.grants.pop();
    h.acked.pop();
    let found = no_rewind(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].detail.contains("new session"),
        "{}",
        found[0].detail
    );
}

/// The gate refuses a restored cluster's write: a violation, unless a higher token of the
/// restored cluster was written there first (ordinary fencing).
#[test]
fn no_rewind_catches_a_gate_refusing_the_restored_cluster() {
    let refusal = |h: &History, token: u64| Refused {
        key: "ns/a".into(),
        token,
        client: 2,
        at_ms: 22_000,
        access: Access::Write,
        slot: None,
        accepted_before: h.accepted.len(),
    };
    let mut h = restored();
    h.refused.push(refusal(&h, FLOOR + 2));
    let found = no_rewind(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].detail.contains("refused"), "{}", found[0].detail);
    // Superseded by a later grant of the restored cluster that wrote first: not a violation.
    let mut h = restored();
    h.grants.push(GrantSeen {
        session: FLOOR + 1,
        ..grant(1, 3, FLOOR + 4, "ns/a")
    });
    h.accepted.push(write("ns/a", FLOOR + 4));
    h.refused.push(refusal(&h, FLOOR + 2));
    assert_eq!(no_rewind(&h), Vec::new());
    // An old cluster's holder refused after the restore: ordinary fencing, not judged here.
    let mut h = restored();
    h.refused.push(refusal(&h, 3));
    assert_eq!(no_rewind(&h), Vec::new());
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
    h.accepted.push(write("ns/a", 3));
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].detail.contains("after a write with token 7"));
}

#[test]
fn fencing_catches_a_token_never_granted() {
    let mut h = good();
    h.accepted.push(write("ns/b", 6));
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
    // A membership change that did not complete is a liveness failure, heal or not.
    h.membership_failures
        .push("replica 4 did not replace replica 1 within 30000 ms".into());
    let found = liveness(&h);
    assert_eq!(found.len(), 1);
    assert!(found[0].detail.contains("replica 4"), "{found:?}");
}

/// Shared holders of `ns/s`: sessions 2 and 3 granted together at revision 10 (a run of shared
/// waiters, one token), session 4 joining at 12; then session 5's exclusive grant at 20.
fn shared_history() -> History {
    let mut h = good();
    for (revision, session) in [(10, 2), (10, 3), (12, 4), (20, 5)] {
        h.grants.push(GrantSeen {
            session,
            ..grant(1, 1, revision, "ns/s")
        });
    }
    h.acked.extend([
        acked_grant("ns/s", 10, 2, Mode::Shared),
        acked_grant("ns/s", 10, 3, Mode::Shared),
        acked_grant("ns/s", 12, 4, Mode::Shared),
        acked_grant("ns/s", 20, 5, Mode::Exclusive),
    ]);
    // The readers read in any order, the writer writes, a reader granted after it reads.
    h.accepted.extend([
        read("ns/s", 12),
        read("ns/s", 10),
        read("ns/s", 10),
        write("ns/s", 20),
        read("ns/s", 20),
    ]);
    let last = &mut h.final_replicas[0];
    last.revision = 40;
    for token in [10, 12, 20] {
        last.events
            .push((token, "ns/s".into(), FinalKind::Granted, token));
    }
    h
}

#[test]
fn shared_holders_granted_together_and_reading_in_any_order_pass() {
    assert_eq!(check_all(&shared_history()), Vec::new());
}

#[test]
fn fencing_catches_a_reader_after_a_later_writer() {
    let mut h = shared_history();
    h.accepted.push(read("ns/s", 12));
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].detail.contains("a read of `ns/s` with token 12")
            && found[0].detail.contains("after a write with token 20"),
        "{}",
        found[0].detail
    );
}

#[test]
fn fencing_catches_an_exclusive_grant_shared_with_another_holder() {
    let mut h = shared_history();
    // Session 6 granted `ns/s` in the exclusive grant's revision.
    h.grants.push(GrantSeen {
        session: 6,
        ..grant(2, 1, 20, "ns/s")
    });
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].detail.contains("exclusive to session 5"),
        "{}",
        found[0].detail
    );
    // The same for two exclusive acknowledgements of one token.
    let mut h = shared_history();
    h.acked.push(acked_grant("ns/s", 20, 7, Mode::Exclusive));
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].detail.contains("sessions {7}"),
        "{}",
        found[0].detail
    );
}

#[test]
fn fencing_catches_a_reader_writing() {
    let mut h = shared_history();
    h.accepted.push(write("ns/s", 20));
    h.accepted.push(write("ns/s", 30));
    h.grants.push(grant(1, 1, 30, "ns/s"));
    h.acked.push(acked_grant("ns/s", 30, 1, Mode::Shared));
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].detail.contains("granted only shared"),
        "{}",
        found[0].detail
    );
}

/// A superseded writer's write after a later reader's read is what the gate allows (reads record
/// nothing): counted, not a violation.
#[test]
fn a_stale_write_over_a_later_read_is_counted_not_flagged() {
    let mut h = shared_history();
    h.grants.push(grant(1, 1, 25, "ns/s"));
    h.acked.push(acked_grant("ns/s", 25, 1, Mode::Shared));
    h.accepted.push(read("ns/s", 25));
    h.accepted.push(write("ns/s", 20));
    assert_eq!(fencing(&h), Vec::new());
    assert_eq!(stale_writes_over_reads(&h), 1);
    assert_eq!(stale_writes_over_reads(&shared_history()), 0);
}

#[test]
fn tokens_rise_allows_one_token_only_for_grants_of_one_revision() {
    let h = shared_history();
    assert_eq!(tokens_rise(&h), Vec::new());
    let mut h = shared_history();
    // A token seen again at a later revision is not a run granted together.
    h.grants.push(GrantSeen {
        revision: 21,
        token: 20,
        session: 8,
        ..grant(1, 1, 21, "ns/s")
    });
    assert!(!tokens_rise(&h).is_empty());
}

/// A semaphore `ns/p` of 2 permits: sessions 2 and 3 granted slots 0 and 1 together at
/// revision 10 (one token), session 4 granted slot 0 at 15 after session 2 released it; every
/// holder writes in its slot, the two slots' writes interleaved.
fn permit_history() -> History {
    let mut h = good();
    h.semaphores.insert("ns/p".into(), 2);
    for (revision, session, slot) in [(10, 2, 0), (10, 3, 1), (15, 4, 0)] {
        h.grants.push(GrantSeen {
            session,
            slot: Some(slot),
            ..grant(1, 1, revision, "ns/p")
        });
        h.acked.push(acked_grant(
            "ns/p",
            revision,
            session,
            Mode::Permit { slot },
        ));
    }
    h.accepted.extend([
        slot_write("ns/p", 1, 10),
        slot_write("ns/p", 0, 10),
        slot_write("ns/p", 0, 15),
        // Slot 1's holder (token 10) writes after slot 0's newer holder (15): other slot.
        slot_write("ns/p", 1, 10),
    ]);
    let last = &mut h.final_replicas[0];
    last.revision = 40;
    for token in [10, 15] {
        last.events
            .push((token, "ns/p".into(), FinalKind::Granted, token));
    }
    h
}

#[test]
fn permits_granted_together_and_writing_in_their_slots_pass() {
    let h = permit_history();
    assert_eq!(check_all(&h), Vec::new());
    // Checker 1: permits granted in one revision share its token.
    assert_eq!(tokens_rise(&h), Vec::new());
}

#[test]
fn fencing_catches_a_superseded_holder_writing_in_its_slot() {
    let mut h = permit_history();
    // Session 2's permit (slot 0, token 10) writes after slot 0's next holder wrote with 15.
    h.accepted.push(slot_write("ns/p", 0, 10));
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .detail
            .contains("a write of `ns/p` slot 0 with token 10")
            && found[0].detail.contains("after a write with token 15"),
        "{}",
        found[0].detail
    );
}

#[test]
fn fencing_catches_a_permit_writing_in_another_slot() {
    let mut h = permit_history();
    // Token 15 was granted slot 0 only.
    h.accepted.push(slot_write("ns/p", 1, 15));
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].detail.contains("`ns/p` slot 1 with token 15")
            && found[0].detail.contains("granted in slot(s)"),
        "{}",
        found[0].detail
    );
}

#[test]
fn fencing_catches_one_slot_granted_twice_and_a_slot_beyond_n() {
    let mut h = permit_history();
    // Session 5 granted slot 1 in the revision that granted it to session 3.
    h.grants.push(GrantSeen {
        session: 5,
        slot: Some(1),
        ..grant(2, 1, 10, "ns/p")
    });
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .detail
            .contains("slot 1 was granted to sessions 3 and 5"),
        "{}",
        found[0].detail
    );
    let mut h = permit_history();
    h.acked
        .push(acked_grant("ns/p", 15, 6, Mode::Permit { slot: 2 }));
    let found = fencing(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .detail
            .contains("slot 2 of a semaphore of 2 permits"),
        "{}",
        found[0].detail
    );
}

/// `ns/w`: session 2 queued at revision 30 (log time 1_000 ms) behind holder 1, which releases at
/// 40 (1_200 ms): a hand-off to session 2. Session 3 queued at 31 and cancelled at 35.
fn wait_history() -> History {
    let mut h = good();
    h.log = vec![
        event(29, 900, "ns/w", 1, LogKind::Granted { token: 29 }),
        event(30, 1_000, "ns/w", 2, LogKind::Queued),
        event(31, 1_010, "ns/w", 3, LogKind::Queued),
        event(
            35,
            1_100,
            "ns/w",
            3,
            LogKind::WaitRemoved {
                cause: WaitCause::Cancelled,
            },
        ),
        event(40, 1_200, "ns/w", 1, LogKind::HoldEnded { token: 29 }),
        event(40, 1_200, "ns/w", 2, LogKind::Granted { token: 40 }),
        // Session 3 takes the free key later with a fresh acquire: no wait to judge.
        event(41, 1_300, "ns/w", 2, LogKind::HoldEnded { token: 40 }),
        event(50, 1_500, "ns/w", 3, LogKind::Granted { token: 50 }),
    ];
    h.attempts = vec![
        attempt(2, "ns/w", Ask::Wait { ms: 1_000 }, Some(300)),
        attempt(3, "ns/w", Ask::CancelAfter { ms: 50 }, None),
    ];
    h
}

#[test]
fn waits_end_passes_hand_offs_to_waiters_and_fresh_grants() {
    assert_eq!(waits_end(&wait_history()), Vec::new());
    // The same stream read twice (a watcher that started over) changes nothing.
    let mut h = wait_history();
    h.log.extend(wait_history().log);
    assert_eq!(waits_end(&h), Vec::new());
}

#[test]
fn waits_end_catches_a_hand_off_to_a_cancelled_wait() {
    let mut h = wait_history();
    // Session 3's cancelled wait is handed the key when session 2 releases.
    h.log.truncate(6);
    h.log.push(event(
        41,
        1_300,
        "ns/w",
        2,
        LogKind::HoldEnded { token: 40 },
    ));
    h.log
        .push(event(41, 1_300, "ns/w", 3, LogKind::Granted { token: 41 }));
    let found = waits_end(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].detail.contains("was cancelled at revision 35"),
        "{}",
        found[0].detail
    );
    // Also when the wait expired in the very revision that grants it.
    let mut h = wait_history();
    h.log.insert(
        4,
        event(
            40,
            1_200,
            "ns/w",
            2,
            LogKind::WaitRemoved {
                cause: WaitCause::Expired,
            },
        ),
    );
    let found = waits_end(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].detail.contains("was expired at revision 40"),
        "{}",
        found[0].detail
    );
}

#[test]
fn grants_past_deadline_catches_a_grant_past_the_deadline() {
    let mut h = wait_history();
    assert_eq!(grants_past_deadline(&h), Vec::new());
    // Session 2's deadline: 1_000 + 150 ms; granted at 1_200.
    h.attempts[0].timeout_ms = Some(150);
    let found = grants_past_deadline(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].checker, Checker::WaitsEnd);
    assert!(
        found[0].detail.contains("past its wait's deadline 1150 ms"),
        "{}",
        found[0].detail
    );
    // A session that also waited on the key without a deadline is not judged.
    h.attempts
        .push(attempt(2, "ns/w", Ask::DropAfter { ms: 10 }, None));
    assert_eq!(waits_end(&h), Vec::new());
}

#[test]
fn waits_end_catches_a_client_granted_after_its_cancel_was_acknowledged() {
    let mut h = wait_history();
    h.attempts[1].cancel = Some(CancelSeen {
        removed: true,
        held_token: None,
        revision: 35,
    });
    h.attempts[1].outcome = Outcome::Granted { token: 50 };
    let found = waits_end(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .detail
            .contains("after its cancel was acknowledged"),
        "{}",
        found[0].detail
    );
    // A cancel that found the key already granted (it raced the grant) answers the hold.
    let mut h = wait_history();
    h.attempts[0].cancel = Some(CancelSeen {
        removed: false,
        held_token: Some(40),
        revision: 40,
    });
    h.attempts[0].outcome = Outcome::Granted { token: 40 };
    h.grants.push(GrantSeen {
        session: 2,
        ..grant(1, 1, 40, "ns/w")
    });
    assert_eq!(waits_end(&h), Vec::new());
    // ... and one naming a hold nobody granted is a violation.
    h.attempts[0].cancel = Some(CancelSeen {
        removed: false,
        held_token: Some(39),
        revision: 40,
    });
    assert_eq!(waits_end(&h).len(), 1);
}

fn lin_read(started_ms: u64, revision: u64) -> ReadSeen {
    ReadSeen {
        client: 7,
        key: "sim/k0".to_string(),
        started_ms,
        answered_ms: started_ms + 3,
        revision,
    }
}

fn grant_acked(at_ms: u64, token: u64) -> GrantAcked {
    GrantAcked { at_ms, token }
}

/// Checker 9: a read sees every grant acknowledged before it was asked; one asked before (or in
/// the same millisecond as) an acknowledgement may miss it; a stale answer is caught, naming
/// the highest token it missed.
#[test]
fn reads_linearizable_catches_a_read_behind_an_acknowledged_grant() {
    let mut h = History {
        grants_acked: vec![
            grant_acked(100, 40),
            grant_acked(120, 55),
            grant_acked(90, 12),
        ],
        reads: vec![
            // Before any acknowledgement: anything goes.
            lin_read(80, 1),
            // Asked in the millisecond of the grant of 40: it may not have seen it.
            lin_read(100, 12),
            // After the grants of 12 and 40, answered from 40 and above.
            lin_read(101, 40),
            lin_read(150, 60),
        ],
        ..History::default()
    };
    assert!(
        reads_linearizable(&h).is_empty(),
        "{:?}",
        reads_linearizable(&h)
    );

    // Asked at 130 (after the grant of 55 at 120), answered from revision 50.
    h.reads.push(lin_read(130, 50));
    let found = reads_linearizable(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].checker, Checker::ReadsLinearizable);
    assert!(
        found[0]
            .detail
            .contains("revision 50, but token 55 was acknowledged at 120 ms"),
        "{}",
        found[0].detail
    );
    // The highest token acknowledged before, not the last one: 40 at 90, then 12 at 95.
    let h = History {
        grants_acked: vec![grant_acked(90, 40), grant_acked(95, 12)],
        reads: vec![lin_read(96, 20)],
        ..History::default()
    };
    let found = reads_linearizable(&h);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0]
        .detail
        .contains("token 40 was acknowledged at 90 ms"));
}
