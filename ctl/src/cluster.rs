//! `picketctl cluster members | status`: the membership and each replica's own status, read
//! with `Admin.GetReplicaStatus` (answered by any replica from its own state).

use std::fmt::Write as _;
use std::time::Duration;

use picket_client::Client;
use picket_proto::proto;
use serde_json::{json, Value};

use super::actions::WaitInEffect;
use super::render::Report;
use super::{ClusterAction, CtlError, Global};

/// The configured members, as the leader knows them (it alone knows how far each member
/// applied: a learner's progress); as the first replica that answers knows them when the leader
/// does not answer.
pub async fn members(global: &Global, client: &Client) -> Result<Report, CtlError> {
    let first = client
        .get_replica_status(proto::GetReplicaStatusRequest {})
        .await?;
    let leader_endpoint = first
        .leader_node_id
        .filter(|leader| *leader != first.node_id)
        .and_then(|leader| first.members.iter().find(|m| m.node_id == leader))
        .map(|m| m.client_endpoint.clone());
    let asked = match leader_endpoint {
        Some(endpoint) => {
            let mut config = global.client_config(None);
            config.endpoints = vec![endpoint];
            config.retry_budget = Duration::ZERO;
            match Client::new(config) {
                Ok(leader) => leader
                    .get_replica_status(proto::GetReplicaStatusRequest {})
                    .await
                    .unwrap_or(first),
                Err(_) => first,
            }
        }
        None => first,
    };
    let mut human = format!(
        "cluster {}: {} members (as replica {} knows them; leader: {})\n",
        asked.cluster_id,
        asked.members.len(),
        asked.node_id,
        asked
            .leader_node_id
            .map_or_else(|| "none known".to_owned(), |l| l.to_string()),
    );
    let _ = writeln!(
        human,
        "{:<4} {:<32} {:<6} {:>10} NOTE",
        "ID", "ENDPOINT", "VOTER", "APPLIED"
    );
    for member in &asked.members {
        let mut note = Vec::new();
        if asked.leader_node_id == Some(member.node_id) {
            note.push("leader");
        }
        if member.node_id == asked.node_id {
            note.push("answered");
        }
        if !member.voter {
            note.push("learner");
        }
        let _ = writeln!(
            human,
            "{:<4} {:<32} {:<6} {:>10} {}",
            member.node_id,
            member.client_endpoint,
            if member.voter { "yes" } else { "no" },
            // The leader knows each member's; another replica only its own.
            member
                .slot_applied
                .map_or_else(|| "-".to_owned(), |s| s.to_string()),
            note.join(", ")
        );
    }
    let json = json!({
        "cluster_id": asked.cluster_id,
        "answered_by": asked.node_id,
        "membership_from_slot": asked.membership_from_slot,
        "leader_node_id": asked.leader_node_id,
        "members": asked.members.iter().map(member_json).collect::<Vec<_>>(),
    });
    Ok(Report { json, human })
}

/// `cluster add | promote | remove`: the change, answered once the log chose it, or with
/// `--wait` once it is in effect on every member of the new membership.
pub async fn change(
    global: &Global,
    client: &Client,
    action: ClusterAction,
) -> Result<Report, CtlError> {
    let (verb, answer, wait) = match action {
        ClusterAction::Add {
            node_id,
            peer_address,
            client_address,
            http_address,
            reason,
            wait,
        } => {
            let request = proto::AddMemberRequest {
                node_id,
                peer_address,
                client_address,
                http_address,
                reason,
            };
            (
                "added as a learner",
                client.add_member(request).await?,
                wait,
            )
        }
        ClusterAction::Promote {
            node_id,
            reason,
            force,
            wait,
        } => {
            let request = proto::PromoteMemberRequest {
                node_id,
                reason,
                force,
            };
            let answer = client.promote_member(request).await?;
            ("promoted to voter", answer, wait)
        }
        ClusterAction::Remove {
            node_id,
            reason,
            force,
            wait,
        } => {
            let request = proto::RemoveMemberRequest {
                node_id,
                reason,
                force,
            };
            ("removed", client.remove_member(request).await?, wait)
        }
        ClusterAction::Members | ClusterAction::Status => unreachable!("not a change"),
    };
    let list = |ids: &[u64]| {
        ids.iter()
            .map(|n| format!("n{n}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut human = format!(
        "{verb}: the membership is now voters {}",
        list(&answer.voters)
    );
    if !answer.learners.is_empty() {
        let _ = write!(human, " learners {}", list(&answer.learners));
    }
    let _ = writeln!(
        human,
        " (chosen; it governs the log from slot {})",
        answer.from_slot
    );
    let mut json = json!({
        "voters": answer.voters,
        "learners": answer.learners,
        "from_slot": answer.from_slot,
    });
    if wait.wait {
        let members: Vec<u64> = answer
            .voters
            .iter()
            .chain(&answer.learners)
            .copied()
            .collect();
        let applied = wait_in_effect(global, client, answer.from_slot, &members, wait).await?;
        let _ = writeln!(
            human,
            "in effect on {} (each applied slot {} or later)",
            list(&members),
            answer.from_slot
        );
        json["in_effect"] = json!(true);
        json["applied"] = json!(applied
            .iter()
            .map(|(id, slot)| (id.to_string(), json!(slot)))
            .collect::<serde_json::Map<_, _>>());
    }
    Ok(Report { json, human })
}

/// How often `--wait` asks each member.
const WAIT_POLL: Duration = Duration::from_millis(100);

/// Asks every member in `members` for its own status (at the endpoint the replica that answers
/// `client` lists for it) until each has applied `from_slot` with a membership governing from it
/// or later: the change is in effect there. Each member's applied slot, or `TimedOut` naming the
/// members it is not yet in effect on.
async fn wait_in_effect(
    global: &Global,
    client: &Client,
    from_slot: u64,
    members: &[u64],
    wait: WaitInEffect,
) -> Result<Vec<(u64, u64)>, CtlError> {
    let deadline = tokio::time::Instant::now() + wait.wait_timeout;
    let mut done: Vec<(u64, u64)> = Vec::new();
    let mut last: Vec<String> = Vec::new();
    loop {
        let listed = client
            .get_replica_status(proto::GetReplicaStatusRequest {})
            .await?;
        last.clear();
        for id in members {
            if done.iter().any(|(d, _)| d == id) {
                continue;
            }
            let Some(member) = listed.members.iter().find(|m| m.node_id == *id) else {
                last.push(format!(
                    "n{id}: not yet listed by the replica that answered"
                ));
                continue;
            };
            match own_status(global, &member.client_endpoint).await {
                Ok(s) if s.slot_applied >= from_slot && s.membership_from_slot >= from_slot => {
                    done.push((*id, s.slot_applied));
                }
                Ok(s) => last.push(format!("n{id}: applied {} of {from_slot}", s.slot_applied)),
                Err(e) => last.push(format!("n{id}: did not answer ({e})")),
            }
        }
        if last.is_empty() {
            done.sort_unstable();
            return Ok(done);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(CtlError::TimedOut(format!(
                "the change is chosen (it governs from slot {from_slot}) but not in effect on \
                 every member after {:?}: {}; `picketctl cluster status` shows each one",
                wait.wait_timeout,
                last.join("; ")
            )));
        }
        tokio::time::sleep(WAIT_POLL.min(deadline - now)).await;
    }
}

/// What one member answered, or why it did not.
type Answer = Result<proto::ReplicaStatus, String>;

/// The status the replica at `endpoint` reports of itself, in one attempt: a member that is
/// down is reported, not waited for.
async fn own_status(global: &Global, endpoint: &str) -> Answer {
    let mut config = global.client_config(None);
    config.endpoints = vec![endpoint.to_owned()];
    config.retry_budget = Duration::ZERO;
    match Client::new(config) {
        Ok(one) => one
            .get_replica_status(proto::GetReplicaStatusRequest {})
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Asks every member (at the endpoint the first replica that answers lists for it) for its own
/// status. `Ok((report, true))` when every member answered and serves.
pub async fn status(global: &Global, client: &Client) -> Result<(Report, bool), CtlError> {
    let asked = client
        .get_replica_status(proto::GetReplicaStatusRequest {})
        .await?;
    let mut answers = tokio::task::JoinSet::new();
    for (index, member) in asked.members.iter().enumerate() {
        if member.node_id == asked.node_id {
            continue;
        }
        let (global, endpoint) = (global.clone(), member.client_endpoint.clone());
        answers.spawn(async move { (index, own_status(&global, &endpoint).await) });
    }
    let mut rows: Vec<(proto::Member, Answer)> = asked
        .members
        .iter()
        .map(|m| (m.clone(), Err("not asked".to_owned())))
        .collect();
    for (index, member) in asked.members.iter().enumerate() {
        if member.node_id == asked.node_id {
            rows[index].1 = Ok(asked.clone());
        }
    }
    while let Some(joined) = answers.join_next().await {
        let (index, answer) = joined.map_err(|e| CtlError::Io(format!("internal: {e}")))?;
        rows[index].1 = answer;
    }
    Ok(render_status(&asked.cluster_id, &rows))
}

fn render_status(cluster_id: &str, rows: &[(proto::Member, Answer)]) -> (Report, bool) {
    let newest = rows
        .iter()
        .filter_map(|(_, a)| a.as_ref().ok().map(|s| s.slot_applied))
        .max()
        .unwrap_or(0);
    let all_serving = rows.iter().all(|(_, a)| a.as_ref().is_ok_and(|s| s.ready));
    let cluster_version = cluster_version_of(rows);
    let mut human = format!("cluster {cluster_id}: {} members\n", rows.len());
    let _ = writeln!(
        human,
        "cluster version: {}",
        cluster_version.map_or_else(
            || "unknown (no member that answered reports one: release 0.1)".to_owned(),
            |v| v.to_string()
        )
    );
    let _ = writeln!(
        human,
        "{:<4} {:<32} {:<11} {:<7} {:>10} {:>7} {:<6} {:<20} {:<8} {:<9} DETAIL",
        "ID",
        "ENDPOINT",
        "ROLE",
        "LEADER",
        "APPLIED",
        "BEHIND",
        "READY",
        "STORAGE",
        "RELEASE",
        "CLUSTER-V"
    );
    let mut members = Vec::new();
    for (member, answer) in rows {
        match answer {
            Ok(s) => {
                let storage = s.storage.clone().unwrap_or_default();
                let condition = if storage.durable_state_lost {
                    "durable_state_lost".to_owned()
                } else {
                    storage.recovery.clone()
                };
                let mut detail = s.detail.clone();
                if let Some(damaged) = &storage.damaged_dir {
                    let _ = write!(detail, "{}damaged dir left at {damaged}", sep(&detail));
                }
                let _ = writeln!(
                    human,
                    "{:<4} {:<32} {:<11} {:<7} {:>10} {:>7} {:<6} {:<20} {:<8} {:<9} {}",
                    member.node_id,
                    member.client_endpoint,
                    role_word(member, s),
                    s.leader_node_id
                        .map_or_else(|| "-".to_owned(), |l| l.to_string()),
                    s.slot_applied,
                    newest - s.slot_applied,
                    if s.ready { "yes" } else { "no" },
                    condition,
                    release_text(s),
                    cluster_version_text(s),
                    detail
                );
                let mut entry = member_json(member);
                entry["status"] = status_json(s);
                entry["behind"] = json!(newest - s.slot_applied);
                entry["error"] = Value::Null;
                members.push(entry);
            }
            Err(error) => {
                let _ = writeln!(
                    human,
                    "{:<4} {:<32} {:<11} {:<7} {:>10} {:>7} {:<6} {:<20} {:<8} {:<9} no answer: \
                     {error}",
                    member.node_id, member.client_endpoint, "-", "-", "-", "-", "no", "-", "-", "-"
                );
                let mut entry = member_json(member);
                entry["status"] = Value::Null;
                entry["behind"] = Value::Null;
                entry["error"] = json!(error);
                members.push(entry);
            }
        }
    }
    let json = json!({
        "cluster_id": cluster_id,
        "all_serving": all_serving,
        "cluster_version": cluster_version,
        "members": members,
    });
    (Report { json, human }, all_serving)
}

/// The cluster version: the highest any member that answered has applied (the others reach it
/// as they catch up); `None` when no member reports one (all of release 0.1).
fn cluster_version_of(rows: &[(proto::Member, Answer)]) -> Option<u32> {
    rows.iter()
        .filter_map(|(_, a)| a.as_ref().ok().map(|s| s.cluster_version))
        .filter(|v| *v > 0)
        .max()
}

/// A member's release (a replica of 0.1 names none).
fn release_text(s: &proto::ReplicaStatus) -> String {
    if s.release.is_empty() {
        "0.1".to_owned()
    } else {
        s.release.clone()
    }
}

/// The cluster version a member's log is at, and the highest it supports: `2 (<=2)`; `-` for a
/// replica of 0.1, which reports neither (it supports 1 only).
fn cluster_version_text(s: &proto::ReplicaStatus) -> String {
    if s.cluster_version == 0 {
        "- (<=1)".to_owned()
    } else {
        format!("{} (<={})", s.cluster_version, s.cluster_version_max)
    }
}

/// The role column: a learner (a non-voting member) is called one, whatever its replica role
/// (it follows the log like a follower, but votes on nothing).
fn role_word<'a>(member: &proto::Member, status: &'a proto::ReplicaStatus) -> &'a str {
    if member.voter || status.role != "follower" {
        &status.role
    } else {
        "learner"
    }
}

fn sep(text: &str) -> &'static str {
    if text.is_empty() {
        ""
    } else {
        "; "
    }
}

fn member_json(member: &proto::Member) -> Value {
    json!({
        "node_id": member.node_id,
        "client_endpoint": member.client_endpoint,
        "voter": member.voter,
        "slot_applied": member.slot_applied,
    })
}

fn status_json(s: &proto::ReplicaStatus) -> Value {
    let storage = s.storage.clone().unwrap_or_default();
    json!({
        "node_id": s.node_id,
        "role": s.role,
        "leader_node_id": s.leader_node_id,
        "ready": s.ready,
        "detail": s.detail,
        "revision": s.revision,
        "slot_applied": s.slot_applied,
        "boot": s.boot,
        "release": release_text(s),
        "cluster_version": s.cluster_version,
        "cluster_version_max": s.cluster_version_max.max(1),
        "peer_protocol_versions": [s.peer_protocol_version_min.max(1), s.peer_protocol_version_max.max(1)],
        "storage": {
            "recovery": storage.recovery,
            "durable_state_lost": storage.durable_state_lost,
            "lost_reason": storage.lost_reason,
            "generation_dir": storage.generation_dir,
            "damaged_dir": storage.damaged_dir,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64) -> proto::Member {
        proto::Member {
            node_id: id,
            client_endpoint: format!("http://127.0.0.1:740{id}"),
            voter: true,
            slot_applied: None,
        }
    }

    fn replica(id: u64, applied: u64, ready: bool) -> proto::ReplicaStatus {
        proto::ReplicaStatus {
            cluster_id: "c".into(),
            node_id: id,
            role: "follower".into(),
            leader_node_id: Some(2),
            ready,
            slot_applied: applied,
            storage: Some(proto::ReplicaStorage {
                recovery: "clean".into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn status_says_who_is_behind_who_did_not_answer_and_whether_all_serve() {
        let rows = vec![
            (member(1), Ok(replica(1, 90, true))),
            (member(2), Ok(replica(2, 100, true))),
            (member(3), Err("connection refused".to_owned())),
        ];
        let (report, all_serving) = render_status("c", &rows);
        assert!(!all_serving);
        assert_eq!(report.json["all_serving"], false);
        assert_eq!(report.json["members"][0]["behind"], 10);
        assert_eq!(report.json["members"][1]["behind"], 0);
        assert_eq!(report.json["members"][2]["error"], "connection refused");
        assert!(report.json["members"][2]["status"].is_null());
        assert!(
            report.human.contains("no answer: connection refused"),
            "{}",
            report.human
        );
        let healthy = vec![
            (member(1), Ok(replica(1, 100, true))),
            (member(2), Ok(replica(2, 100, true))),
        ];
        assert!(render_status("c", &healthy).1);
        let recovering = vec![(member(1), Ok(replica(1, 100, false)))];
        assert!(!render_status("c", &recovering).1);
    }

    #[test]
    fn status_shows_each_members_release_and_the_cluster_version() {
        let new = |id, version| proto::ReplicaStatus {
            release: "0.2.0".into(),
            cluster_version: version,
            cluster_version_max: 2,
            peer_protocol_version_min: 1,
            peer_protocol_version_max: 1,
            ..replica(id, 100, true)
        };
        // Mid-upgrade: one replica of 0.1 (reports no versions), two of 0.2 at version 1.
        let mixed = vec![
            (member(1), Ok(replica(1, 100, true))),
            (member(2), Ok(new(2, 1))),
            (member(3), Ok(new(3, 1))),
        ];
        let (report, _) = render_status("c", &mixed);
        assert_eq!(report.json["cluster_version"], 1);
        assert_eq!(report.json["members"][0]["status"]["release"], "0.1");
        assert_eq!(report.json["members"][0]["status"]["cluster_version"], 0);
        assert_eq!(
            report.json["members"][0]["status"]["cluster_version_max"],
            1
        );
        assert_eq!(report.json["members"][1]["status"]["release"], "0.2.0");
        assert_eq!(
            report.json["members"][1]["status"]["cluster_version_max"],
            2
        );
        assert!(
            report.human.contains("cluster version: 1\n"),
            "{}",
            report.human
        );
        assert!(
            report.human.contains("0.2.0    1 (<=2)"),
            "{}",
            report.human
        );
        assert!(
            report.human.contains("0.1      - (<=1)"),
            "{}",
            report.human
        );
        // Stepped: the version the members applied.
        let stepped = vec![(member(2), Ok(new(2, 2))), (member(3), Ok(new(3, 1)))];
        assert_eq!(render_status("c", &stepped).0.json["cluster_version"], 2);
        // Nobody reports one (all 0.1): unknown.
        let old = vec![(member(1), Ok(replica(1, 100, true)))];
        let (report, _) = render_status("c", &old);
        assert!(report.json["cluster_version"].is_null());
        assert!(
            report.human.contains("cluster version: unknown"),
            "{}",
            report.human
        );
    }
}
