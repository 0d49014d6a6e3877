//! Membership changes against real `picketd` processes (issue 20): a replica at a new address
//! joins as a learner, is promoted, the leader is removed, and the cluster keeps serving with
//! rising tokens, every change audited with its actor and reason.

mod support;

use std::process::Stdio;
use std::time::Duration;

use picket_net::proto;
use support::{acquire, admin, at_leader, create_session, granted, release, Cluster};

const NS: &str = "orders";

fn picketctl(
    cluster: &Cluster,
    principal: &str,
    roles: &str,
    args: &[&str],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_picketctl"));
    command
        .arg("--endpoints")
        .arg(cluster.endpoints.join(","))
        .arg("--principal")
        .arg(principal)
        .arg("--roles")
        .arg(roles)
        .env_remove("PICKET_AUTH_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .args(args);
    command
}

async fn json_of(mut command: tokio::process::Command) -> serde_json::Value {
    let out = command.output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Takes and releases `key` once at the leader; the token.
async fn take_and_release(cluster: &Cluster, session: u64, request: u64, key: &str) -> u64 {
    let endpoints = cluster.endpoints.clone();
    let response = at_leader(&endpoints, 0, |e| acquire_owned(e, session, request, key))
        .await
        .unwrap();
    let token = granted(&response).expect("granted");
    at_leader(&endpoints, 0, |e| {
        release_owned(e, session, request + 1, key, token)
    })
    .await
    .unwrap();
    token
}

async fn acquire_owned(
    e: String,
    session: u64,
    request: u64,
    key: &str,
) -> Result<proto::AcquireResponse, tonic::Status> {
    acquire(&e, session, request, NS, key, 0).await
}

async fn release_owned(
    e: String,
    session: u64,
    request: u64,
    key: &str,
    token: u64,
) -> Result<proto::ReleaseResponse, tonic::Status> {
    release(&e, session, request, NS, key, token).await
}

async fn status_of(endpoint: &str) -> Option<proto::ReplicaStatus> {
    let mut client = admin(endpoint).await.ok()?;
    client
        .get_replica_status(proto::GetReplicaStatusRequest {})
        .await
        .ok()
        .map(|r| r.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_at_a_new_address_joins_is_promoted_and_the_leader_is_removed() {
    let mut cluster = Cluster::start();
    let leader = cluster.leader(Duration::from_secs(20)).await;
    let session = create_session(&cluster.endpoints[leader], "svc", 60_000).await;
    let first = take_and_release(&cluster, session, 1, "invoice/1").await;

    // Nobody without picket-admin changes the membership.
    let refused = picketctl(
        &cluster,
        "mallory",
        "on-call",
        &["cluster", "remove", "1", "--reason", "x"],
    )
    .output()
    .await
    .unwrap();
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("missing_role"),
        "{refused:?}"
    );

    // A new replica at a new address joins as a learner.
    let (joiner, peer, client) = cluster.start_joiner();
    let added = json_of(picketctl(
        &cluster,
        "alice",
        "class-admin",
        &[
            "--json",
            "cluster",
            "add",
            "4",
            "--peer-address",
            &peer,
            "--client-address",
            &client,
            "--reason",
            "replace the machine of n1",
        ],
    ))
    .await;
    assert_eq!(added["voters"], serde_json::json!([1, 2, 3]), "{added}");
    assert_eq!(added["learners"], serde_json::json!([4]), "{added}");

    // It catches up, as the leader sees it (the applied slot its heartbeat acknowledgements
    // report), then is promoted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leader_status = status_of(&cluster.endpoints[leader]).await.unwrap();
        let seen = leader_status
            .members
            .iter()
            .find(|m| m.node_id == 4)
            .and_then(|m| m.slot_applied);
        if seen.is_some_and(|s| s > 0 && s + 8 >= leader_status.slot_applied) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the learner did not catch up ({seen:?} of {}); its log:\n{}",
            leader_status.slot_applied,
            cluster.log(joiner)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let promoted = json_of(picketctl(
        &cluster,
        "alice",
        "class-admin",
        &["--json", "cluster", "promote", "4", "--reason", "caught up"],
    ))
    .await;
    assert_eq!(
        promoted["voters"],
        serde_json::json!([1, 2, 3, 4]),
        "{promoted}"
    );
    let second = take_and_release(&cluster, session, 3, "invoice/1").await;
    assert!(second > first, "tokens rise: {first} then {second}");

    // The leader itself is removed: it hands over once the change is in effect.
    let leader_id = (leader + 1).to_string();
    let removed = json_of(picketctl(
        &cluster,
        "alice",
        "class-admin",
        &[
            "--json",
            "cluster",
            "remove",
            &leader_id,
            "--reason",
            "machine retired",
        ],
    ))
    .await;
    let voters: Vec<u64> = (1..=4).filter(|n| *n != leader as u64 + 1).collect();
    assert_eq!(removed["voters"], serde_json::json!(voters), "{removed}");

    // Another leader serves; the old one's data is all there and tokens still rise.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let new_leader = loop {
        let mut found = None;
        for i in cluster.running().into_iter().filter(|i| *i != leader) {
            if let Some(s) = status_of(&cluster.endpoints[i]).await {
                if s.role == "leader" && s.ready {
                    found = Some((i, s));
                }
            }
        }
        if let Some(found) = found {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new leader after the removal"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (new_leader, status) = new_leader;
    assert_ne!(new_leader, leader);
    let listed: Vec<(u64, bool)> = status
        .members
        .iter()
        .map(|m| (m.node_id, m.voter))
        .collect();
    assert_eq!(
        listed,
        voters.iter().map(|v| (*v, true)).collect::<Vec<_>>()
    );
    assert!(status.membership_from_slot > 1, "{status:?}");
    cluster.kill(leader);
    let third = take_and_release(&cluster, session, 5, "invoice/1").await;
    assert!(third > second, "tokens rise: {second} then {third}");

    // Every change is in the audit log with who asked and why.
    let mut client = admin(&cluster.endpoints[new_leader]).await.unwrap();
    let audit = client
        .query_audit(proto::QueryAuditRequest::default())
        .await
        .unwrap()
        .into_inner();
    let changes: Vec<(String, String, String)> = audit
        .records
        .iter()
        .filter(|r| r.action == proto::AuditAction::MembershipChanged as i32)
        .map(|r| (r.actor.clone(), r.reason.clone(), r.membership.clone()))
        .collect();
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert_eq!(changes[0].0, "alice");
    assert_eq!(changes[0].1, "replace the machine of n1");
    assert_eq!(changes[0].2, "voters n1,n2,n3 learners n4");
    assert_eq!(changes[2].1, "machine retired");
}
