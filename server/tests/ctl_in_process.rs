//! The client library and picketctl's commands (the `picketctl` crate's library, called in
//! process) against a real in-process 3-replica cluster (`DevCluster`: real nodes, storage,
//! gRPC on loopback, dev auth). Here rather than in the picketctl crate, which does not depend
//! on the server.

#[path = "support/client.rs"]
mod requests;

use std::time::Duration;

use picket_client::{Client, ClientConfig, ClientError, LostReason, SessionEnd};
use picket_client::{FencingError, FencingGate};
use picket_server::dev::DevCluster;

use picketctl::commands::approve;
use picketctl::{Ack, CtlError};

const NS: &str = "orders";

async fn cluster() -> (DevCluster, usize) {
    let cluster = DevCluster::start().await.expect("dev cluster starts");
    let leader = cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("a leader is elected");
    (cluster, leader)
}

/// A client whose first endpoint is a follower, so its first call is redirected.
fn client(cluster: &DevCluster, leader: usize, principal: &str, roles: &str) -> Client {
    let mut endpoints = cluster.client_endpoints();
    let follower = (leader + 1) % endpoints.len();
    endpoints.rotate_left(follower);
    let mut config = ClientConfig::new(endpoints, "ctl-e2e");
    config.session_ttl = Some(Duration::from_secs(5));
    config.wait_slice = Duration::from_secs(2);
    config.credentials = requests::dev_credentials(principal, roles);
    Client::new(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_hand_off_in_order_and_the_gate_refuses_the_old_holder() {
    let (cluster, leader) = cluster().await;
    let client = client(&cluster, leader, "svc", "");
    let first = client.create_session().await.unwrap();
    assert_eq!(
        client.leader_guess(),
        cluster.client_endpoint(leader),
        "followed the hint"
    );
    let second = client.create_session().await.unwrap();

    let held = first.lock(NS, "ledger/1").await.unwrap();
    let busy = second.try_lock(NS, "ledger/1").await.unwrap_err();
    assert!(
        matches!(busy, ClientError::Held { holder_session_id, token, .. }
            if holder_session_id == first.id() && token == held.token().0),
        "{busy}"
    );
    let waiter = second.clone();
    let waiting = tokio::spawn(async move { waiter.lock(NS, "ledger/1").await });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let gate = FencingGate::new(64);
    gate.check("ledger/1", held.token()).unwrap();
    let old_token = held.token();
    let next = held
        .release()
        .await
        .unwrap()
        .expect("the waiter is granted in the release");
    let granted = waiting.await.unwrap().unwrap();
    assert_eq!(next.session_id, second.id());
    assert_eq!(granted.token().0, next.token);
    assert!(granted.token() > old_token);
    gate.check("ledger/1", granted.token()).unwrap();
    assert!(matches!(
        gate.check("ledger/1", old_token),
        Err(FencingError::Stale { .. })
    ));
    granted.release().await.unwrap();
    first.close().await.unwrap();
    second.close().await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_force_release_with_revoke_fires_the_holders_lost_signal() {
    let (cluster, leader) = cluster().await;
    let holder = client(&cluster, leader, "svc", "");
    let alice = client(&cluster, leader, "alice", "on-call,class-admin");
    let bob = client(&cluster, leader, "bob", "on-call");

    let class = requests::fenced_class("ledger", 5_000, 60_000);
    requests::put_class(&alice, NS, class).await;
    let session = holder.create_session().await.unwrap();
    let guard = session.lock(NS, "ledger/7").await.unwrap();

    let requested = alice
        .request_force_release(requests::force_release_request(
            NS,
            "ledger/7",
            guard.token().0,
            "holder hung (test)",
            true,
        ))
        .await
        .unwrap();
    assert!(requested.fenced);
    let id = requested.force_release_id;

    // picketctl refuses the fenced approval without the acknowledgement; the lock stays.
    let refused = approve(&bob, id, None).await.unwrap_err();
    assert!(matches!(refused, CtlError::Refused(_)), "{refused}");
    assert!(guard.is_held());

    let report = approve(&bob, id, Some(Ack::Fenced)).await.unwrap();
    assert_eq!(report.json["released_token"], guard.token().0);
    assert_eq!(report.json["session_revoked"], session.id());
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the holder learns of the revocation (pushed, else at its next keepalive)");
    assert!(
        matches!(
            reason,
            LostReason::Revoked
                | LostReason::UnknownSession
                | LostReason::Ended {
                    cause: SessionEnd::Revoked { .. },
                    ..
                }
        ),
        "{reason}"
    );
    assert!(!guard.is_held());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_outlives_its_leader_and_the_client_follows_the_new_one() {
    let (mut cluster, leader) = cluster().await;
    let client = client(&cluster, leader, "svc", "");
    let session = client.create_session().await.unwrap();
    let guard = session.lock(NS, "jobs/1").await.unwrap();
    cluster.stop(leader).await;
    let new_leader = cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("a new leader");
    assert_ne!(new_leader, leader);
    // Calls after the change reach the new leader, and the session is still kept alive.
    let other = session.lock(NS, "jobs/2").await.unwrap();
    assert!(other.token() > guard.token());
    tokio::time::sleep(session.ttl()).await;
    assert!(
        guard.is_held(),
        "kept alive through the new leader: {session:?}"
    );
    cluster.shutdown().await;
}

fn cli(cluster: &DevCluster, args: &[&str]) -> picketctl::Cli {
    let endpoints = cluster.client_endpoints().join(",");
    let mut argv = vec!["picketctl", "--endpoints", &endpoints];
    argv.extend_from_slice(args);
    <picketctl::Cli as clap::Parser>::try_parse_from(argv).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_runs_the_command_with_the_token_and_exits_with_its_status() {
    let (cluster, _) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env");
    let script = format!(
        "echo \"$PICKET_TOKEN $PICKET_NAMESPACE $PICKET_KEY\" > {}; exit 7",
        out.display()
    );
    let command = cli(
        &cluster,
        &["lock", NS, "batch/1", "--", "sh", "-c", &script],
    );
    let code = picketctl::execute(command).await.unwrap();
    assert_eq!(code, 7, "exits with the command's status");
    let seen = std::fs::read_to_string(&out).unwrap();
    let fields: Vec<&str> = seen.split_whitespace().collect();
    assert_eq!(fields[1..], [NS, "batch/1"]);
    assert!(fields[0].parse::<u64>().unwrap() > 0, "a token: {seen}");

    // Released afterwards: the key is free for the next taker.
    let client = client(&cluster, 0, "svc", "");
    let session = client.create_session().await.unwrap();
    let next = session.try_lock(NS, "batch/1").await.unwrap();
    assert!(next.token().0 > fields[0].parse::<u64>().unwrap());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_kills_the_command_when_the_lock_is_lost() {
    let (cluster, leader) = cluster().await;
    let command = cli(
        &cluster,
        &[
            "lock", NS, "batch/2", "--ttl-ms", "3000", "--", "sleep", "30",
        ],
    );
    let running = tokio::spawn(picketctl::execute(command));
    let operator = client(&cluster, leader, "alice", "on-call");
    let approver = client(&cluster, leader, "bob", "on-call");
    // Wait until the command holds the lock.
    let token = holder_token(&operator, "batch/2").await;
    let requested = operator
        .request_force_release(requests::force_release_request(
            NS,
            "batch/2",
            token,
            "test: revoke the holder",
            true,
        ))
        .await
        .unwrap();
    approve(
        &approver,
        requested.force_release_id,
        Some(Ack::from_fenced(requested.fenced)),
    )
    .await
    .unwrap();
    let code = requests::joined(
        running,
        "the command is killed long before its 30 s sleep ends",
    )
    .await;
    assert_eq!(code, picketctl::EXIT_LOCK_LOST);
    cluster.shutdown().await;
}

async fn holder_token(operator: &Client, key: &str) -> u64 {
    loop {
        let info = requests::inspect_key(operator, NS, key).await;
        if let Some(holder) = info.holder {
            break holder.token;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads a pid the command wrote to `path`, waiting for it.
async fn pid_in(path: &std::path::Path) -> i32 {
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Gone, or a zombie waiting for whoever reaps it.
fn process_gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            == Some("Z")
    })
}

/// Issue 16, findings 3 and 4: a force-release without `--revoke-session` never reached
/// `picketctl lock`, whose command kept writing; and on loss only the direct child was killed,
/// so `sh -c 'sleep ...'` left `sleep` running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_without_revocation_stops_the_commands_whole_group() {
    let (cluster, leader) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let sleep_file = dir.path().join("sleep");
    let script = format!("sleep 601 & echo $! > {}; wait", sleep_file.display());
    let command = cli(
        &cluster,
        &[
            "lock", NS, "batch/3", "--ttl-ms", "3000", "--name", "nightly", "--", "sh", "-c",
            &script,
        ],
    );
    let running = tokio::spawn(picketctl::execute(command));
    let operator = client(&cluster, leader, "alice", "on-call");
    let approver = client(&cluster, leader, "bob", "on-call");
    let token = holder_token(&operator, "batch/3").await;
    let sleep_pid = pid_in(&sleep_file).await;
    // The identity names the command (its pid) and --name, not picketctl.
    let info = requests::inspect_key(&operator, NS, "batch/3").await;
    let identity = info.holder.unwrap().identity.unwrap();
    assert_eq!(identity.name, "nightly");
    assert_ne!(identity.pid, std::process::id(), "not picketctl's pid");
    assert!(!process_gone(identity.pid as i32), "the command runs");
    let requested = operator
        .request_force_release(requests::force_release_request(
            NS,
            "batch/3",
            token,
            "test: no revocation",
            false,
        ))
        .await
        .unwrap();
    let report = approve(
        &approver,
        requested.force_release_id,
        Some(Ack::from_fenced(requested.fenced)),
    )
    .await
    .unwrap();
    assert!(
        report.human.contains("WITHOUT --revoke-session"),
        "{}",
        report.human
    );
    let code = requests::joined(running, "picketctl stops the command at the next keepalive").await;
    assert_eq!(code, picketctl::EXIT_LOCK_LOST);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !process_gone(sleep_pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "sleep {sleep_pid} outlived the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(process_gone(identity.pid as i32));
    cluster.shutdown().await;
}

/// Issue 16, finding 5: a waiter that gave up stayed queued, and was later granted with nobody
/// there; the class's default TTL was ignored (a class allowing at most 5 s made a plain
/// `picketctl lock` fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_times_out_leaves_the_queue_and_the_class_ttl_is_used() {
    let (cluster, leader) = cluster().await;
    let admin = client(&cluster, leader, "carol", "class-admin");
    let class = requests::fenced_class("short", 3_000, 5_000);
    requests::put_class(&admin, NS, class).await;
    let holder = client(&cluster, leader, "svc", "");
    let session = holder.create_session().await.unwrap();
    let guard = session.lock(NS, "short/1").await.unwrap();
    let command = cli(
        &cluster,
        &["lock", NS, "short/1", "--timeout", "1s", "--", "true"],
    );
    let started = tokio::time::Instant::now();
    let error = picketctl::execute(command).await.unwrap_err();
    assert!(matches!(error, CtlError::TimedOut(_)), "{error}");
    assert_eq!(error.exit(), picketctl::EXIT_TIMED_OUT);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "bounded by --timeout"
    );
    let info = requests::inspect_key(&holder, NS, "short/1").await;
    assert_eq!(info.queue_depth, 0, "the wait left the queue: {info:?}");
    guard.release().await.unwrap();
    // Without --ttl-ms the class's default (3 s, under its 5 s max) is used: the lock is taken.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ttl");
    let script = format!("echo ok > {}", out.display());
    let command = cli(
        &cluster,
        &["lock", NS, "short/1", "--", "sh", "-c", &script],
    );
    assert_eq!(picketctl::execute(command).await.unwrap(), 0);
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "ok");
    // Busy, with --no-wait, has its own exit status.
    let _held = session.lock(NS, "short/1").await.unwrap();
    let command = cli(
        &cluster,
        &["lock", NS, "short/1", "--no-wait", "--", "true"],
    );
    let error = picketctl::execute(command).await.unwrap_err();
    assert_eq!(error.exit(), picketctl::EXIT_BUSY, "{error}");
    cluster.shutdown().await;
}

/// `cluster members` and `cluster status` (`Admin.GetReplicaStatus`) against three real
/// replicas: every member listed with its endpoint, one leader that all follow, and a stopped
/// member reported as not answering (exit status 1) while the others still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_status_lists_every_member_and_names_the_one_that_does_not_answer() {
    let (mut cluster, leader) = cluster().await;
    let command = cli(&cluster, &["cluster", "members"]);
    let client = Client::new(command.global.client_config(None)).unwrap();
    let members = picketctl::cluster::members(&command.global, &client)
        .await
        .unwrap();
    let listed = members.json["members"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 3, "{}", members.human);
    for (i, member) in listed.iter().enumerate() {
        assert_eq!(member["client_endpoint"], cluster.client_endpoint(i));
        assert_eq!(member["voter"], true);
    }
    let leader_id = cluster.config(leader).node_id;
    assert_eq!(
        members.json["leader_node_id"], leader_id,
        "{}",
        members.human
    );
    // Answered by the leader, whichever replica was asked first: every member's progress.
    assert_eq!(members.json["answered_by"], leader_id, "{}", members.human);
    for member in &listed {
        assert!(member["slot_applied"].is_u64(), "{}", members.human);
    }

    // Every member answers for itself and follows the same leader.
    let mut all_serve = false;
    for _ in 0..50 {
        let command = cli(&cluster, &["cluster", "status"]);
        let (report, serving) = picketctl::cluster::status(&command.global, &client)
            .await
            .unwrap();
        if serving {
            for (i, member) in report.json["members"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
            {
                let status = &member["status"];
                assert_eq!(status["node_id"], cluster.config(i).node_id);
                assert_eq!(status["leader_node_id"], leader_id, "{}", report.human);
                let role = if i == leader { "leader" } else { "follower" };
                assert_eq!(status["role"], role, "{}", report.human);
                assert_eq!(status["storage"]["recovery"], "clean");
            }
            all_serve = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(all_serve, "the three replicas never all served");
    let exit = picketctl::execute(cli(&cluster, &["--json", "cluster", "status"])).await;
    assert_eq!(exit.unwrap(), picketctl::EXIT_OK);

    // A stopped follower: listed, with the reason; the others still answer; exit status 1.
    let victim = (leader + 1) % 3;
    cluster.stop(victim).await;
    let command = cli(&cluster, &["--timeout-ms", "1000", "cluster", "status"]);
    let (report, serving) = picketctl::cluster::status(&command.global, &client)
        .await
        .unwrap();
    assert!(!serving, "{}", report.human);
    let rows = report.json["members"].as_array().unwrap();
    assert!(rows[victim]["status"].is_null(), "{}", report.human);
    assert!(!rows[victim]["error"].as_str().unwrap().is_empty());
    assert!(report.human.contains("no answer"), "{}", report.human);
    assert_eq!(rows[leader]["status"]["role"], "leader", "{}", report.human);
    let exit = picketctl::execute(cli(
        &cluster,
        &["--timeout-ms", "1000", "cluster", "status"],
    ))
    .await;
    assert_eq!(exit.unwrap(), picketctl::EXIT_ERROR);
    cluster.shutdown().await;
}

/// `cluster add --wait` exits 4 when the change is not in effect on every member in time, and
/// names the member: here a learner whose picketd never runs, so it never applies the change.
/// The change itself stays chosen: the learner is listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_waited_for_times_out_naming_the_member_it_is_not_in_effect_on() {
    let (cluster, _) = cluster().await;
    let started = std::time::Instant::now();
    let outcome = picketctl::execute(cli(
        &cluster,
        &[
            "--principal",
            "alice",
            "--roles",
            "picket-admin",
            "cluster",
            "add",
            "9",
            "--peer-address",
            "127.0.0.1:9",
            "--client-address",
            "127.0.0.1:9",
            "--reason",
            "a learner that never starts",
            "--wait",
            "--wait-timeout",
            "1s",
        ],
    ))
    .await;
    let error = outcome.expect_err("not in effect on n9");
    assert_eq!(error.exit(), picketctl::EXIT_TIMED_OUT, "{error}");
    let message = error.to_string();
    assert!(message.contains("n9"), "{message}");
    assert!(message.contains("not in effect"), "{message}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "gave up before its time box"
    );
    let command = cli(&cluster, &["cluster", "members"]);
    let client = Client::new(command.global.client_config(None)).unwrap();
    let members = picketctl::cluster::members(&command.global, &client)
        .await
        .unwrap();
    let learner = members.json["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["node_id"] == 9)
        .cloned();
    assert_eq!(
        learner.map(|m| m["voter"].clone()),
        Some(serde_json::json!(false)),
        "{}",
        members.human
    );
    cluster.shutdown().await;
}
