//! Membership changes against real `picketd` processes (issue 20): a replica at a new address
//! joins as a learner, is promoted, the leader is removed, and the cluster keeps serving with
//! rising tokens, every change audited with its actor and reason; and the whole round (3 -> 5,
//! a replacement, the leader removed, back to 3) under client load.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picket_client::{Client, ClientConfig, ClientError};
use picket_proto::proto;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_at_a_new_address_joins_is_promoted_and_the_leader_is_removed() {
    let started_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
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
        let leader_status = support::status_of(&cluster.endpoints[leader])
            .await
            .unwrap();
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

    // The leader itself is removed: it hands over once the change is in effect. `--wait`
    // answers once every remaining member applied the slot the change governs from (the
    // runbook's step 5, before the old machine is stopped).
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
            "--wait",
        ],
    ))
    .await;
    let voters: Vec<u64> = (1..=4).filter(|n| *n != leader as u64 + 1).collect();
    assert_eq!(removed["voters"], serde_json::json!(voters), "{removed}");
    assert_eq!(removed["in_effect"], serde_json::json!(true), "{removed}");
    let from_slot = removed["from_slot"].as_u64().expect("from_slot");
    for voter in &voters {
        let applied = removed["applied"][voter.to_string()]
            .as_u64()
            .unwrap_or_else(|| panic!("no applied slot for n{voter}: {removed}"));
        assert!(applied >= from_slot, "n{voter} at {applied} < {from_slot}");
    }

    // Another leader serves; the old one's data is all there and tokens still rise.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let new_leader = loop {
        let mut found = None;
        for i in cluster.running().into_iter().filter(|i| *i != leader) {
            if let Some(s) = support::status_of(&cluster.endpoints[i]).await {
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
    let records: Vec<&proto::AuditRecord> = audit
        .records
        .iter()
        .filter(|r| r.action == proto::AuditAction::MembershipChanged as i32)
        .collect();
    let changes: Vec<(String, String, String)> = records
        .iter()
        .map(|r| (r.actor.clone(), r.reason.clone(), r.membership.clone()))
        .collect();
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert_eq!(changes[0].0, "alice");
    assert_eq!(changes[0].1, "replace the machine of n1");
    assert_eq!(
        changes[0].2,
        "voters n1,n2,n3 learners n4 (n4 added as a learner)"
    );
    assert_eq!(
        changes[1].2, "voters n1,n2,n3,n4 (n4 promoted to voter)",
        "{changes:?}"
    );
    assert!(
        changes[2].2.ends_with(&format!(
            "(n{leader_id} removed (was a voter); its id is never reused)"
        )),
        "{changes:?}"
    );
    assert_eq!(changes[2].1, "machine retired");
    // Each change has a revision and a time of its own (issue 33: all three carried one
    // revision and a time from before the new replica started), and the roles it was asked with.
    for pair in records.windows(2) {
        assert!(pair[1].revision > pair[0].revision, "{records:?}");
        assert!(pair[1].time_ms >= pair[0].time_ms, "{records:?}");
    }
    for r in &records {
        assert_eq!(r.actor_roles, vec![proto::Role::ClassAdmin as i32], "{r:?}");
        assert!(
            r.time_ms >= started_ms,
            "{r:?} is older than the test ({started_ms})"
        );
    }

    // A removed member's id is never a member again.
    let admin = cluster.admin_client("membership-e2e");
    let again = admin
        .add_member(proto::AddMemberRequest {
            node_id: leader as u64 + 1,
            peer_address: "127.0.0.1:9".into(),
            client_address: "127.0.0.1:9".into(),
            http_address: String::new(),
            reason: "the old machine is back".into(),
        })
        .await;
    match again {
        Err(ClientError::Refused { refusal, .. }) => {
            assert_eq!(refusal.rule, "member_id_retired", "{refusal:?}")
        }
        other => panic!("re-adding a removed id: {other:?}"),
    }
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
        let admin = cluster.admin_client("membership-e2e");
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

/// Waits until the leader has heard member `id` apply a slot within 48 of its own.
async fn caught_up(cluster: &Cluster, id: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, status) = cluster.current_leader().await;
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
    let (leader, status) = cluster.current_leader().await;
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
    let (leader, _) = cluster.current_leader().await;
    let removed = change(&cluster, Change::Remove(leader as u64 + 1)).await;
    assert_eq!(removed.voters.len(), 4, "{removed:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (new_leader, _) = loop {
        let found = cluster.current_leader().await;
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

    let (leader, status) = cluster.current_leader().await;
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

/// Waits until a leader other than `not` leads and serves; how long it took from `since`.
async fn leader_other_than(
    cluster: &Cluster,
    not: Option<usize>,
    since: tokio::time::Instant,
    what: &str,
) -> (usize, Duration) {
    let deadline = since + Duration::from_secs(20);
    loop {
        for i in cluster.running() {
            if Some(i) == not {
                continue;
            }
            if let Some(status) = support::status_of(&cluster.endpoints[i]).await {
                if status.role == "leader" && status.ready {
                    let took = since.elapsed();
                    eprintln!("{what}: node {} leads and serves {took:?} after", i + 1);
                    return (i, took);
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader within 20 s {what}; logs:\n{}",
            cluster
                .running()
                .iter()
                .map(|i| format!("--- node {}:\n{}", i + 1, cluster.log(*i)))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The runbook's step 5: every replica but `removed` applied the slot the new membership
/// governs from before the removed one is stopped.
async fn in_effect_everywhere(cluster: &Cluster, removed: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    'wait: loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change is not in effect everywhere"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        for i in cluster.running().into_iter().filter(|i| *i != removed) {
            let Some(s) = support::status_of(&cluster.endpoints[i]).await else {
                continue 'wait;
            };
            if s.members.iter().any(|m| m.node_id == removed as u64 + 1)
                || s.slot_applied < s.membership_from_slot
            {
                continue 'wait;
            }
        }
        return;
    }
}

/// A removed replica says so (`/healthz` and `GetReplicaStatus` role `removed`, not ready),
/// never campaigns, and sends clients to the leader.
async fn says_removed(cluster: &Cluster, removed: usize, leader: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        let status = support::status_of(&cluster.endpoints[removed]).await;
        if let Some(s) = status.filter(|s| s.role == "removed") {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {} does not say it was removed; its log:\n{}",
            removed + 1,
            cluster.log(removed)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!status.ready, "{status:?}");
    assert!(
        cluster.log(removed).contains("REMOVED"),
        "no REMOVED line in its log"
    );
    // It keeps saying so for a few election timeouts: never a pre-candidate again.
    for _ in 0..10 {
        let s = support::status_of(&cluster.endpoints[removed])
            .await
            .unwrap();
        assert_eq!(s.role, "removed", "{s:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A client that asks it is pointed at the leader.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let refused = support::try_create_session(&cluster.endpoints[removed], "lost", 10_000)
            .await
            .unwrap_err();
        assert_eq!(support::rule(&refused), "not_leader", "{refused:?}");
        let detail = picket_proto::status::error_detail(&refused).expect("a detail");
        if detail.leader_endpoint == cluster.endpoints[leader] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the removed replica does not point at the leader {}: {detail:?}",
            cluster.endpoints[leader]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Replaces member `old` as docs/runbooks/replace-machine.md says, the new machine's file
/// naming only `contact` (a running member that is not the leader); returns the new index and
/// how long after the removal was answered a leader served.
async fn replace_per_runbook(
    cluster: &mut Cluster,
    load: &Load,
    old: usize,
    contact: usize,
) -> (usize, Duration) {
    let (leader, _) = cluster.current_leader().await;
    assert_ne!(contact, leader, "the contact is not the leader");
    // 2. Start the new replica: `join = true`, itself and one running member.
    let (new, peer, client) = cluster.start_joiner_with_contacts(&[contact]);
    let id = new as u64 + 1;
    // 3. Add it as a learner.
    let added = change(cluster, Change::Add { id, peer, client }).await;
    assert!(added.learners.contains(&id), "{added:?}");
    // 4. Promote it once it follows.
    caught_up(cluster, id).await;
    let promoted = change(cluster, Change::Promote(id)).await;
    assert!(promoted.voters.contains(&id), "{promoted:?}");
    load.progress(20, "after the promotion").await;
    // 5. Remove the old one.
    let old_id = old as u64 + 1;
    let removed = change(cluster, Change::Remove(old_id)).await;
    assert!(!removed.voters.contains(&old_id), "{removed:?}");
    let asked = tokio::time::Instant::now();
    let (leader, took) = leader_other_than(
        cluster,
        Some(old),
        asked,
        &format!("after node {old_id} was removed"),
    )
    .await;
    says_removed(cluster, old, leader).await;
    in_effect_everywhere(cluster, old).await;
    cluster.kill(old);
    load.progress(20, "after the old member stopped").await;
    (new, took)
}

/// Issue 34's "done when": docs/runbooks/replace-machine.md followed literally. Each new
/// machine's file names one running member that is not the leader. The leader is replaced,
/// then a follower, then every member restarts; a leader serves after each step, every member
/// is ready after the restart, no acknowledged grant is lost and tokens rise. Then a replica
/// whose disk is wiped after those changes rejoins with a one-member contact list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_machine_runbook_literally_with_one_contact_that_is_not_the_leader() {
    let mut cluster = Cluster::start();
    cluster.leader(Duration::from_secs(20)).await;
    let load = Load::start(&cluster, 2);
    load.progress(20, "before any change").await;
    let mut took = Vec::new();

    // The leader's machine is replaced.
    let (leader, _) = cluster.current_leader().await;
    let contact = (0..3).find(|i| *i != leader).unwrap();
    let (first_new, t) = replace_per_runbook(&mut cluster, &load, leader, contact).await;
    took.push(("the leader replaced", t));

    // Then a follower's: the contact is a running member that is not the leader (the replica
    // that joined first, if it does not lead).
    let (leader, _) = cluster.current_leader().await;
    let follower = cluster
        .running()
        .into_iter()
        .find(|i| *i != leader && *i != first_new)
        .unwrap();
    let contact = if first_new != leader {
        first_new
    } else {
        cluster
            .running()
            .into_iter()
            .find(|i| *i != leader && *i != follower)
            .unwrap()
    };
    let (second_new, t) = replace_per_runbook(&mut cluster, &load, follower, contact).await;
    took.push(("a follower replaced", t));
    let fence = load.stop().await;

    // Every member restarts (their files: the first one's three original members, or one
    // contact for the new ones; none names all of today's members).
    let members = cluster.running();
    assert_eq!(members.len(), 3);
    assert!(members.contains(&first_new) && members.contains(&second_new));
    for i in &members {
        cluster.kill(*i);
    }
    let restarted = tokio::time::Instant::now();
    for i in &members {
        cluster.spawn_with(*i, &[]);
    }
    let (leader, t) = leader_other_than(&cluster, None, restarted, "after a full restart").await;
    took.push(("every member restarted", t));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for i in &members {
        loop {
            let ready = support::status_of(&cluster.endpoints[*i])
                .await
                .is_some_and(|s| s.ready);
            if ready {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {} is not ready after the restart; its log:\n{}",
                i + 1,
                cluster.log(*i)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eprintln!(
        "every member ready {:?} after the restart",
        restarted.elapsed()
    );

    // Nothing acknowledged was lost: the next grant of each key is above every token taken.
    let session = create_session(&cluster.endpoints[leader], "after", 60_000).await;
    let mut next = BTreeMap::new();
    for (n, key) in LOAD_KEYS.iter().enumerate() {
        let token = take_and_release(&cluster, session, 100 + 2 * n as u64, key).await;
        assert!(token > fence[*key], "{key}: {token} after {}", fence[*key]);
        next.insert(*key, token);
    }

    // A replica whose disk is wiped after the two changes (an original member, the one that
    // is not the leader, or else the second new one) comes back with `--rejoin` and a file
    // naming only one other member.
    let wiped = members
        .iter()
        .copied()
        .find(|i| *i != leader && *i < 3)
        .unwrap_or(second_new);
    let contact = members.iter().copied().find(|i| *i != wiped).unwrap();
    cluster.kill(wiped);
    std::fs::remove_dir_all(cluster.data_dir(wiped)).unwrap();
    cluster.write_contact_file(wiped, &[contact]);
    let rejoined = tokio::time::Instant::now();
    cluster.spawn_with(wiped, &["--rejoin"]);
    let deadline = rejoined + Duration::from_secs(60);
    loop {
        let status = support::status_of(&cluster.endpoints[wiped]).await;
        let done = status.as_ref().is_some_and(|s| {
            s.ready && s.storage.as_ref().is_some_and(|st| !st.durable_state_lost)
        });
        if done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {} did not rejoin with one contact: {status:?}; its log:\n{}",
            wiped + 1,
            cluster.log(wiped)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "node {} rejoined with one contact {:?} after its start",
        wiped + 1,
        rejoined.elapsed()
    );
    assert!(
        cluster
            .log(wiped)
            .contains("learned the cluster's membership from a peer"),
        "it says it learned the membership"
    );
    let (leader, _) = cluster.current_leader().await;
    let session = create_session(&cluster.endpoints[leader], "after-rejoin", 60_000).await;
    for (n, key) in LOAD_KEYS.iter().enumerate() {
        let token = take_and_release(&cluster, session, 200 + 2 * n as u64, key).await;
        assert!(token > next[*key], "{key}: {token} after {}", next[*key]);
    }
    for (step, t) in &took {
        eprintln!("leader serving after {step}: {t:?}");
    }
}
