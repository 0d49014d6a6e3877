//! Membership changes against real `picketd` processes (issue 20): a replica at a new address
//! joins as a learner, is promoted, the leader is removed, and the cluster keeps serving with
//! rising tokens, every change audited with its actor and reason; and the whole round (3 -> 5,
//! a replacement, the leader removed, back to 3) under client load.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picket_net::client::{Client, ClientConfig, ClientError, Credentials};
use picket_net::proto;
use support::{acquire, admin, at_leader, create_session, granted, json_of, release, Cluster};

const NS: &str = "orders";

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
    let refused = cluster
        .picketctl_as(
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
    let added = json_of(cluster.picketctl_as(
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
    let promoted = json_of(cluster.picketctl_as(
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
    let removed = json_of(cluster.picketctl_as(
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

/// An admin client (dev auth: `alice`, `class-admin`) of every replica running now.
fn admin_client(cluster: &Cluster) -> Client {
    let endpoints: Vec<String> = cluster
        .running()
        .into_iter()
        .map(|i| cluster.endpoints[i].clone())
        .collect();
    let mut config = ClientConfig::new(endpoints, "membership-e2e");
    config.credentials = Credentials {
        principal: Some("alice".into()),
        roles: Some("class-admin".into()),
        bearer: None,
    };
    Client::new(config).unwrap()
}

#[derive(Clone, Debug)]
enum Change {
    Add {
        id: u64,
        peer: String,
        client: String,
    },
    Promote(u64),
    Remove(u64),
}

/// Asks for `change` until the cluster takes it: a change asked while the one before is not in
/// effect yet (`membership_change_in_progress`), or a promotion of a learner a little behind
/// under load (`learner_not_caught_up`), is asked again; any other refusal fails the test.
async fn change(cluster: &Cluster, change: Change) -> proto::MembershipChangeResponse {
    let reason = format!("{change:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let admin = admin_client(cluster);
        let answer = match &change {
            Change::Add { id, peer, client } => {
                admin
                    .add_member(proto::AddMemberRequest {
                        node_id: *id,
                        peer_address: peer.clone(),
                        client_address: client.clone(),
                        http_address: String::new(),
                        reason: reason.clone(),
                    })
                    .await
            }
            Change::Promote(id) => {
                admin
                    .promote_member(proto::PromoteMemberRequest {
                        node_id: *id,
                        reason: reason.clone(),
                        force: false,
                    })
                    .await
            }
            Change::Remove(id) => {
                admin
                    .remove_member(proto::RemoveMemberRequest {
                        node_id: *id,
                        reason: reason.clone(),
                        force: false,
                    })
                    .await
            }
        };
        match answer {
            Ok(answer) => return answer,
            Err(ClientError::Refused { refusal, .. })
                if matches!(
                    refusal.rule.as_str(),
                    "membership_change_in_progress" | "learner_not_caught_up"
                ) && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("{change:?}: {error}"),
        }
    }
}

/// The index of the replica that leads and serves now, waiting up to 20 s.
async fn current_leader(cluster: &Cluster) -> (usize, proto::ReplicaStatus) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        for i in cluster.running() {
            if let Some(status) = status_of(&cluster.endpoints[i]).await {
                if status.role == "leader" && status.ready {
                    return (i, status);
                }
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader serves");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the leader has heard member `id` apply a slot within 48 of its own.
async fn caught_up(cluster: &Cluster, id: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, status) = current_leader(cluster).await;
        let seen = status
            .members
            .iter()
            .find(|m| m.node_id == id)
            .and_then(|m| m.slot_applied);
        if seen.is_some_and(|s| s > 0 && s + 48 >= status.slot_applied) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "member {id} did not catch up ({seen:?} of {}); its log:\n{}",
            status.slot_applied,
            cluster.log(id as usize - 1)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Workers that take and release a few contended keys through the client library for as long
/// as the test runs. Each write "to the resource" is checked against the highest token the
/// resource accepted for the key: a grant whose token is not above it (a lost grant, two holders,
/// a token that fell) is a violation.
struct Load {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    fence: Arc<Mutex<BTreeMap<String, u64>>>,
    workers: Vec<tokio::task::JoinHandle<Result<u64, String>>>,
}

const LOAD_KEYS: [&str; 2] = ["ledger/a", "ledger/b"];

impl Load {
    fn start(cluster: &Cluster, workers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let fence = Arc::new(Mutex::new(BTreeMap::new()));
        let workers = (0..workers)
            .map(|w| {
                let mut config = ClientConfig::new(cluster.endpoints.clone(), "load");
                config.session_ttl = Some(Duration::from_secs(10));
                let client = Client::new(config).unwrap();
                let (stop, ops, fence) = (stop.clone(), ops.clone(), fence.clone());
                tokio::spawn(async move {
                    let session = client
                        .create_session()
                        .await
                        .map_err(|e| format!("worker {w}: create session: {e}"))?;
                    let mut done = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let key = LOAD_KEYS[(done as usize + w) % LOAD_KEYS.len()];
                        let guard = session
                            .lock(NS, key)
                            .await
                            .map_err(|e| format!("worker {w}: lock {key}: {e}"))?;
                        let token = guard.token().0;
                        {
                            let mut fence = fence.lock().unwrap();
                            let highest = fence.entry(key.to_owned()).or_insert(0);
                            if token <= *highest {
                                return Err(format!(
                                    "worker {w}: {key} granted with token {token}, but the \
                                     resource already accepted {highest}"
                                ));
                            }
                            *highest = token;
                        }
                        guard
                            .release()
                            .await
                            .map_err(|e| format!("worker {w}: release {key}: {e}"))?;
                        done += 1;
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                    session
                        .close()
                        .await
                        .map_err(|e| format!("worker {w}: close: {e}"))?;
                    Ok(done)
                })
            })
            .collect();
        Load {
            stop,
            ops,
            fence,
            workers,
        }
    }

    /// Waits until the workers finished `more` operations beyond those done so far: the
    /// cluster serves.
    async fn progress(&self, more: u64, what: &str) {
        let target = self.ops.load(Ordering::Relaxed) + more;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.ops.load(Ordering::Relaxed) < target {
            assert!(
                !self.workers.iter().any(|w| w.is_finished()),
                "a worker stopped ({what})"
            );
            assert!(
                tokio::time::Instant::now() < deadline,
                "no progress under load {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the workers; every one of them must have ended without an error.
    async fn stop(self) -> BTreeMap<String, u64> {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            let done = worker.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
            assert!(done > 0, "every worker took locks");
        }
        let fence = self.fence.lock().unwrap().clone();
        eprintln!(
            "{} locks taken and released under load, highest tokens {fence:?}",
            self.ops.load(Ordering::Relaxed)
        );
        fence
    }
}

/// The "done when": under client load a 3-replica cluster grows to 5, one member is
/// replaced by a replica at a new address, the leader is removed, and the cluster shrinks back
/// to 3 — no acknowledged grant lost, tokens still rising, and no client error (the client
/// library's retries of a leader change are all the workers see).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_three_grow_to_five_one_is_replaced_the_leader_removed_and_back_to_three() {
    let mut cluster = Cluster::start();
    cluster.leader(Duration::from_secs(20)).await;
    let load = Load::start(&cluster, 4);
    load.progress(50, "before any change").await;

    // 3 -> 5.
    for _ in 0..2 {
        let (i, peer, client) = cluster.start_joiner();
        let id = i as u64 + 1;
        let added = change(&cluster, Change::Add { id, peer, client }).await;
        assert!(added.learners.contains(&id), "{added:?}");
        caught_up(&cluster, id).await;
        let promoted = change(&cluster, Change::Promote(id)).await;
        assert!(promoted.voters.contains(&id), "{promoted:?}");
        load.progress(50, "after a member joined").await;
    }
    let (leader, status) = current_leader(&cluster).await;
    assert_eq!(status.members.iter().filter(|m| m.voter).count(), 5);

    // One of the first three (not the leader) is replaced by a replica at a new address.
    let replaced = (0..3).find(|i| *i != leader).unwrap();
    let (i, peer, client) = cluster.start_joiner();
    let id = i as u64 + 1;
    change(&cluster, Change::Add { id, peer, client }).await;
    caught_up(&cluster, id).await;
    change(&cluster, Change::Promote(id)).await;
    let removed = change(&cluster, Change::Remove(replaced as u64 + 1)).await;
    assert!(
        !removed.voters.contains(&(replaced as u64 + 1)),
        "{removed:?}"
    );
    cluster.kill(replaced);
    load.progress(50, "after a member was replaced").await;

    // The leader is removed: another takes over, and the workers carry on.
    let (leader, _) = current_leader(&cluster).await;
    let removed = change(&cluster, Change::Remove(leader as u64 + 1)).await;
    assert_eq!(removed.voters.len(), 4, "{removed:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (new_leader, _) = loop {
        let found = current_leader(&cluster).await;
        if found.0 != leader {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the removed leader still leads"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    cluster.kill(leader);
    load.progress(50, "after the leader was removed").await;

    // Back to 3: one more member (not the leader) leaves.
    let last = cluster
        .running()
        .into_iter()
        .find(|i| *i != new_leader)
        .unwrap();
    let removed = change(&cluster, Change::Remove(last as u64 + 1)).await;
    assert_eq!(removed.voters.len(), 3, "{removed:?}");
    cluster.kill(last);
    load.progress(50, "after shrinking to 3").await;
    let fence = load.stop().await;

    let (leader, status) = current_leader(&cluster).await;
    let voters: Vec<u64> = status
        .members
        .iter()
        .filter(|m| m.voter)
        .map(|m| m.node_id)
        .collect();
    let mut running: Vec<u64> = cluster.running().iter().map(|i| *i as u64 + 1).collect();
    running.sort_unstable();
    assert_eq!(voters, running, "the three left are the voters");
    assert!(status.members.iter().all(|m| m.voter), "{status:?}");

    // Nothing acknowledged was lost: the next grant of every key is above every token the
    // resource accepted.
    let session = create_session(&cluster.endpoints[leader], "after", 60_000).await;
    for (n, key) in LOAD_KEYS.iter().enumerate() {
        let token = take_and_release(&cluster, session, 100 + 2 * n as u64, key).await;
        assert!(token > fence[*key], "{key}: {token} after {}", fence[*key]);
    }
}
