//! One line per action, for the scripted tests' golden files.

use std::fmt::Debug;

use crate::paxos::{Action, Message, NodeId, Persist};

pub(super) fn render<C: Debug, S: Debug>(id: NodeId, action: &Action<C, S>) -> String {
    match action {
        Action::Persist(Persist {
            id: pid,
            promised,
            accepted,
            snapshot,
            schedule,
            incarnation,
            recovered,
            ..
        }) => {
            let mut s = format!("{id}: persist #{pid}");
            if let Some(p) = promised {
                s += &format!(" promised={p}");
            }
            for (slot, b, v) in accepted {
                s += &format!(" accept(s{slot}@{b}={v})");
            }
            if let Some((slot, _)) = snapshot {
                s += &format!(" snapshot=s{slot}");
            } else if let Some(schedule) = schedule {
                // The first membership, learned from a peer.
                s += &format!(
                    " first-membership(v{})",
                    schedule.entries()[0].1.cluster_version
                );
            }
            if let Some((node, inc)) = incarnation {
                s += &format!(" incarnation({node}={inc})");
            }
            if *recovered {
                s += " recovered";
            }
            s
        }
        Action::Send { to, msg } => format!("{id} -> {to}: {}", message(msg)),
        Action::Apply { slot, value } => format!("{id}: apply s{slot} {value}"),
        Action::InstallSnapshot { slot, .. } => format!("{id}: install-snapshot s{slot}"),
        Action::ReadReady {
            id: rid,
            slot_applied_min,
        } => format!("{id}: read-ready r{} min=s{slot_applied_min}", rid.0),
        Action::ReadFailed { id: rid } => format!("{id}: read-failed r{}", rid.0),
        Action::RoleChanged {
            role,
            ballot,
            leader,
        } => {
            let l = leader.map_or("-".to_string(), |l| l.to_string());
            format!("{id}: role {role:?} ballot={ballot} leader={l}")
        }
    }
}

fn message<C: Debug, S: Debug>(m: &Message<C, S>) -> String {
    match m {
        Message::PreVote { round } => format!("pre-vote r{round}"),
        Message::PreVoteReply { round, granted } => {
            format!("pre-vote-reply r{round} granted={granted}")
        }
        Message::Prepare {
            ballot,
            slot_from,
            incarnation,
        } => format!("prepare {ballot} from=s{slot_from}{}", inc(*incarnation)),
        Message::Promise {
            ballot,
            slot_applied,
            slot_snapshot,
            accepted,
        } => {
            let mut s =
                format!("promise {ballot} applied=s{slot_applied} snapshot=s{slot_snapshot}");
            for (slot, b, v) in accepted {
                s += &format!(" (s{slot}@{b}={v})");
            }
            s
        }
        Message::Accept {
            ballot,
            slot,
            value,
            slot_chosen,
            incarnation,
        } => format!(
            "accept {ballot} s{slot}={value} chosen=s{slot_chosen}{}",
            inc(*incarnation)
        ),
        Message::Accepted { ballot, slot } => format!("accepted {ballot} s{slot}"),
        Message::Nack { ballot, promised } => format!("nack {ballot} promised={promised}"),
        Message::Heartbeat {
            ballot,
            slot_chosen,
            seq,
            incarnation,
            lease_ms,
        } => format!(
            "heartbeat {ballot} chosen=s{slot_chosen} seq={seq}{}{}",
            inc(*incarnation),
            lease(*lease_ms)
        ),
        Message::HeartbeatAck {
            ballot,
            seq,
            lease_ms,
            ..
        } => format!("heartbeat-ack {ballot} seq={seq}{}", lease(*lease_ms)),
        Message::CatchupRequest { slot_from } => format!("catchup-request from=s{slot_from}"),
        Message::CatchupReply {
            snapshot, entries, ..
        } => {
            let mut s = "catchup-reply".to_string();
            if let Some((slot, _)) = snapshot {
                s += &format!(" snapshot=s{slot}");
            }
            if let (Some(a), Some(b)) = (entries.first(), entries.last()) {
                s += &format!(" entries=s{}..s{}", a.0, b.0);
            }
            s
        }
        Message::RecoverQuery { nonce } => format!("recover-query {nonce:x}"),
        Message::RecoverReply {
            nonce,
            incarnation,
            slot_applied,
        } => {
            format!("recover-reply {nonce:x} incarnation={incarnation} applied={slot_applied}")
        }
        Message::Fence { nonce, incarnation } => {
            format!("fence {nonce:x} incarnation={incarnation}")
        }
        Message::FenceAck { nonce, promised } => {
            format!("fence-ack {nonce:x} promised={promised}")
        }
    }
}

/// Incarnations are shown only once a replica has recovered from disk loss.
fn inc(incarnation: u64) -> String {
    if incarnation == 0 {
        String::new()
    } else {
        format!(" inc={incarnation}")
    }
}

/// A read lease asked or granted, when there is one.
fn lease(ms: u64) -> String {
    if ms == 0 {
        String::new()
    } else {
        format!(" lease={ms}ms")
    }
}
