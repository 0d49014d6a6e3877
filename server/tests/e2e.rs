//! End-to-end: three real `picketd` processes on loopback (spawned from the built binary, killed
//! by PID when the test ends).
// Real processes, sockets and TLS: not under the simulator.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_proto::proto;
use support::*;
use tonic::Code;

const NS: &str = "orders";
const ELECTION: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_locks_fifo_handoff_and_rising_tokens() {
    let (cluster, leader, at) = cluster_with_leader(ELECTION).await;

    // A follower refuses with the leader's client endpoint, in details and metadata.
    let follower = (leader + 1) % 3;
    // (It learns who leads from the leader's first heartbeat: ask until it knows.)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        let status = try_create_session(&cluster.endpoints[follower], "svc", 10_000)
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        let hint = picket_proto::status::leader_hint(&status).unwrap();
        if hint.endpoint.is_some() || tokio::time::Instant::now() > deadline {
            assert_eq!(hint.endpoint.as_deref(), Some(at.as_str()));
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        status
            .metadata()
            .get("picket-leader")
            .unwrap()
            .to_str()
            .unwrap(),
        at
    );

    let a = create_session(&at, "svc-a", 10_000).await;
    let b = create_session(&at, "svc-b", 10_000).await;
    assert_ne!(a, b);
    let ka = keepalive(&at, a).await.unwrap();
    assert_eq!((ka.session_id, ka.ttl_ms, ka.lost), (a, 10_000, false));

    let first = acquire(&at, a, 1, NS, "invoice/42", 0).await.unwrap();
    let t1 = granted(&first).expect("a is granted");
    // A retry with the same request id gets the same grant.
    let again = acquire(&at, a, 1, NS, "invoice/42", 0).await.unwrap();
    assert_eq!(granted(&again), Some(t1));
    // b waits (the call is held) until a releases.
    let at_b = at.clone();
    let waiter = tokio::spawn(async move { acquire(&at_b, b, 1, NS, "invoice/42", 10_000).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "b's acquire is held while a holds the key"
    );
    let info = inspect(&at, NS, "invoice/42", false).await.unwrap();
    assert_eq!(info.holder.as_ref().unwrap().session_id, a);
    assert_eq!(info.queue_depth, 1);
    let released = release(&at, a, 2, NS, "invoice/42", t1).await.unwrap();
    let next = released.next.expect("b is granted in the same revision");
    assert_eq!(next.session_id, b);
    let b_reply = waiter.await.unwrap().unwrap();
    let t2 = granted(&b_reply).expect("b's held call answers Granted");
    assert_eq!(t2, next.token);
    assert!(t2 > t1, "tokens rise: {t2} after {t1}");
    // Try-lock on a held key: Busy with the holder.
    let busy = acquire(&at, a, 3, NS, "invoice/42", 0).await.unwrap();
    match busy.reply.unwrap().kind.unwrap() {
        proto::acquire_reply::Kind::Busy(busy) => assert_eq!(busy.holder_session_id, b),
        other => panic!("expected Busy, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_clearly_and_changes_nothing() {
    let (_cluster, _, at) = cluster_with_leader(ELECTION).await;
    let s = create_session(&at, "svc", 10_000).await;
    let token = granted(&acquire(&at, s, 1, NS, "k", 0).await.unwrap()).unwrap();

    let status = assert_code(
        acquire(&at, s, 2, "Orders", "k", 0).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    assert!(
        status.message().starts_with("acquire.namespace: "),
        "{status:?}"
    );
    let long_key = "k".repeat(513);
    let status = assert_code(
        acquire(&at, s, 2, NS, &long_key, 0).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    assert!(status.message().starts_with("acquire.key: "), "{status:?}");
    assert_code(
        acquire(&at, s, 0, NS, "k", 0).await,
        Code::InvalidArgument,
        "invalid_argument",
    );
    // A message above the 4 MiB API limit is refused by the server's decoder.
    let huge = "x".repeat(5 << 20);
    let status = acquire(&at, s, 2, NS, &huge, 0).await.unwrap_err();
    assert!(
        matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{status:?}"
    );
    assert_code(
        acquire(&at, 987_654, 1, NS, "k2", 0).await,
        Code::NotFound,
        "unknown_session",
    );
    assert_code(
        release(&at, s, 3, NS, "k", token + 1000).await,
        Code::FailedPrecondition,
        "wrong_token",
    );
    let ka = keepalive(&at, 987_654).await.unwrap();
    assert!(ka.lost, "an unknown session's keepalive says lost");
    // Admin mutations without the principal metadata are refused.
    let mut admin_client = admin(&at).await.unwrap();
    let status = admin_client
        .approve_force_release(proto::ApproveForceReleaseRequest {
            force_release_id: 1,
            acknowledged_fenced: true,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated);

    // Nothing changed, and the server still serves.
    let info = inspect(&at, NS, "k", false).await.unwrap();
    let holder = info.holder.unwrap();
    assert_eq!((holder.session_id, holder.token), (s, token));
    assert!(inspect(&at, NS, "k2", false)
        .await
        .unwrap()
        .holder
        .is_none());
    let other = granted(&acquire(&at, s, 4, NS, "k3", 0).await.unwrap()).unwrap();
    assert!(other > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_9_keeps_holds_sessions_and_rising_tokens_and_a_follower_catches_up() {
    let mut cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let at = cluster.endpoints[leader].clone();
    let a = create_session(&at, "svc-a", 10_000).await;
    let b = create_session(&at, "svc-b", 10_000).await;
    let mut tokens = Vec::new();
    for (i, key) in ["k1", "k2", "k3"].iter().enumerate() {
        let t = granted(&acquire(&at, a, i as u64 + 1, NS, key, 0).await.unwrap()).unwrap();
        tokens.push(t);
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]));

    let killed_at = tokio::time::Instant::now();
    cluster.kill(leader);
    let new_leader = cluster.leader(ELECTION).await;
    let took = killed_at.elapsed();
    assert_ne!(new_leader, leader);
    assert!(took < Duration::from_secs(5), "new leader after {took:?}");
    let eps = cluster.endpoints.clone();

    // Acknowledged holds survive, sessions are alive, tokens keep rising.
    for (key, token) in ["k1", "k2", "k3"].iter().zip(&tokens) {
        let info = at_leader(&eps, new_leader, |ep| async move {
            inspect(&ep, NS, key, false).await
        })
        .await
        .unwrap();
        let holder = info.holder.expect("the hold survives the leader's death");
        assert_eq!((holder.session_id, holder.token), (a, *token));
    }
    let ka = at_leader(
        &eps,
        new_leader,
        |ep| async move { keepalive(&ep, a).await },
    )
    .await
    .unwrap();
    assert!(!ka.lost, "the session survives the leader's death");
    let reply = at_leader(&eps, new_leader, |ep| async move {
        acquire(&ep, b, 1, NS, "k4", 0).await
    })
    .await
    .unwrap();
    let t4 = granted(&reply).unwrap();
    assert!(
        t4 > tokens[2],
        "tokens rise across leaders: {t4} after {}",
        tokens[2]
    );

    // The killed node restarts from its data and catches up.
    cluster.spawn(leader);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(info) = inspect(&cluster.endpoints[leader], NS, "k4", true).await {
            if info.holder.as_ref().is_some_and(|h| h.token == t4) {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restarted node did not catch up; log:\n{}",
            cluster.log(leader)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_all_three_recovers_from_disk() {
    let mut cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let at = cluster.endpoints[leader].clone();
    let a = create_session(&at, "svc-a", 20_000).await;
    let t1 = granted(&acquire(&at, a, 1, NS, "k", 0).await.unwrap()).unwrap();
    // Enough commands for snapshots (every 16 slots): recovery starts from one.
    for i in 0..24u64 {
        acquire(&at, a, i + 2, NS, &format!("more/{i}"), 0)
            .await
            .unwrap();
    }

    // One graceful stop (SIGTERM), two kill -9.
    let status = cluster.terminate(0);
    assert!(status.success(), "SIGTERM exits cleanly: {status:?}");
    assert!(cluster.log(0).contains("stopped"), "{}", cluster.log(0));
    cluster.kill(1);
    cluster.kill(2);
    for i in 0..3 {
        cluster.spawn(i);
    }
    let leader = cluster.leader(ELECTION).await;
    let eps = cluster.endpoints.clone();
    let info = at_leader(&eps, leader, |ep| async move {
        inspect(&ep, NS, "k", false).await
    })
    .await
    .unwrap();
    let holder = info.holder.expect("the hold is recovered from disk");
    assert_eq!((holder.session_id, holder.token), (a, t1));
    let ka = at_leader(&eps, leader, |ep| async move { keepalive(&ep, a).await })
        .await
        .unwrap();
    assert!(!ka.lost);
    let s2 = at_leader(&eps, leader, |ep| async move {
        try_create_session(&ep, "svc-b", 10_000).await
    })
    .await
    .unwrap();
    let reply = at_leader(&eps, leader, |ep| async move {
        acquire(&ep, s2, 1, NS, "other", 0).await
    })
    .await
    .unwrap();
    let t2 = granted(&reply).unwrap();
    assert!(t2 > t1);
    assert!((0..3).all(|i| cluster.log(i).contains("recovered")));
    assert!(
        (0..3).any(|i| cluster.log(i).contains("snapshot_slot=Some")),
        "a replica recovered from a snapshot"
    );
}

/// One client acquires new keys in a loop, following the leader, while the leader is killed:
/// every acknowledged grant is still held afterwards with its token, and tokens rose in the
/// order they were acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_acquire_is_lost_when_the_leader_is_killed_under_load() {
    leader_killed_under_load(Cluster::start()).await;
}

/// The same with `[storage] persist = "thread"`: an acknowledgement still means the fdatasync
/// of the persist thread returned, so a kill -9 loses nothing that was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_persist_thread_no_acknowledged_acquire_is_lost_when_the_leader_is_killed() {
    let cluster = Cluster::start_persisting("thread");
    for i in 0..3 {
        wait_for_log(&cluster, i, "written by the persist thread").await;
    }
    leader_killed_under_load(cluster).await;
}

async fn wait_for_log(cluster: &Cluster, i: usize, line: &str) {
    for _ in 0..100 {
        if cluster.log(i).contains(line) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "replica {} never logged {line:?}:\n{}",
        i + 1,
        cluster.log(i)
    );
}

async fn leader_killed_under_load(mut cluster: Cluster) {
    let leader = cluster.leader(ELECTION).await;
    let session = create_session(&cluster.endpoints[leader], "load", 10_000).await;
    let endpoints = cluster.endpoints.clone();
    let load = tokio::spawn(async move {
        let mut acked: Vec<(String, u64)> = Vec::new();
        let mut at = leader;
        let started = tokio::time::Instant::now();
        let mut i = 0u64;
        while started.elapsed() < Duration::from_millis(2_500) {
            let key = format!("load/{i}");
            match acquire(&endpoints[at], session, i + 1, NS, &key, 0).await {
                Ok(reply) => {
                    acked.push((key, granted(&reply).expect("a fresh key is granted")));
                    i += 1;
                }
                // Not the leader, or the leader is gone: retry the same request elsewhere.
                Err(status) => {
                    let hint = picket_proto::status::leader_hint(&status)
                        .and_then(|h| h.node_id)
                        .map(|n| n as usize - 1);
                    at = hint.unwrap_or((at + 1) % 3);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        acked
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.kill(leader);
    let acked = load.await.unwrap();
    assert!(acked.len() > 10, "the load made progress: {}", acked.len());
    assert!(
        acked.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens rise in acknowledgment order"
    );
    let new_leader = cluster.leader(ELECTION).await;
    let eps = cluster.endpoints.clone();
    for (key, token) in &acked {
        let info = at_leader(&eps, new_leader, |ep| async move {
            inspect(&ep, NS, key, false).await
        })
        .await
        .unwrap();
        let holder = info
            .holder
            .unwrap_or_else(|| panic!("acknowledged grant of {key} lost"));
        assert_eq!(
            (holder.session_id, holder.token),
            (session, *token),
            "{key}"
        );
    }
    // With `snapshot_every_slots = 16` the replicas took snapshots on the way.
    let snapshots = cluster
        .dir
        .path()
        .join(format!("node-{}/replica-1/snapshots", new_leader + 1));
    let taken = std::fs::read_dir(&snapshots)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "snap")
        })
        .count();
    assert!(taken >= 1, "no snapshot in {}", snapshots.display());
}

/// With `[tls]`: replicas elect a leader over mutual TLS, clients are served over `https://`,
/// and a plaintext client gets nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_https_and_its_peers_use_mutual_tls() {
    let cluster = Cluster::start_with(true);
    let leader = cluster.leader(ELECTION).await;
    let at = cluster.endpoints[leader].clone();
    assert!(at.starts_with("https://"));
    let s = create_session(&at, "svc", 10_000).await;
    let t = granted(&acquire(&at, s, 1, NS, "k", 0).await.unwrap()).unwrap();
    let info = inspect(&at, NS, "k", false).await.unwrap();
    assert_eq!(info.holder.unwrap().token, t);
    let plain = at.replace("https://", "http://");
    let refused = try_create_session(&plain, "svc", 10_000).await;
    assert!(
        refused.is_err(),
        "plaintext must not be served on a TLS port"
    );
}

/// A replica whose log is damaged starts amnesiac (loudly), re-learns its state from the others,
/// and then counts again: with another replica down, it and the leader still make progress.
/// Holds on `k0..k{n-1}` taken by `session` at the leader; the last token.
async fn hold_keys(eps: &[String], leader: usize, session: u64, n: u64) -> u64 {
    let mut last = 0;
    for i in 0..n {
        let reply = acquire(&eps[leader], session, i + 1, NS, &format!("k{i}"), 0)
            .await
            .unwrap();
        last = granted(&reply).unwrap();
    }
    last
}

/// Waits until replica `i` started amnesiac (`DURABLE STATE LOST` in its log, `why` among the
/// reason) has caught up (its own applied state shows `key` held with `token`) and recovered
/// (it reports `Follower` or `Leader` after that line: it votes and accepts again).
async fn wait_amnesiac_recovers(cluster: &Cluster, i: usize, why: &str, key: &str, token: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let caught_up = inspect(&cluster.endpoints[i], NS, key, true)
            .await
            .is_ok_and(|info| info.holder.is_some_and(|h| h.token == token));
        let log = cluster.log(i);
        let recovered = log.find("DURABLE STATE LOST").is_some_and(|at| {
            let since = &log[at..];
            since.contains(why)
                && (since.contains("role=Follower") || since.contains("role=Leader"))
        });
        if caught_up && recovered {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replica {i} did not catch up ({caught_up}) and recover ({recovered}); log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With the third replica killed, the leader still commits: the quorum of two needs the
/// recovered `victim`. The grant's token is above `last`.
async fn commits_through(cluster: &mut Cluster, leader: usize, victim: usize, s: u64, last: u64) {
    let third = 3 - leader - victim;
    cluster.kill(third);
    let eps = cluster.endpoints.clone();
    let reply = at_leader(&eps, leader, |ep| async move {
        acquire(&ep, s, 100, NS, "after", 0).await
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e:?}\nleader {leader} victim {victim} third {third}\n--- victim log:\n{}\n--- leader log:\n{}",
            cluster.log(victim),
            cluster.log(leader),
        )
    });
    assert!(granted(&reply).unwrap() > last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_a_corrupt_log_starts_amnesiac_and_rejoins() {
    let mut cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let eps = cluster.endpoints.clone();
    let s = create_session(&eps[leader], "svc", 20_000).await;
    let last = hold_keys(&eps, leader, s, 20).await;
    let victim = (leader + 1) % 3;
    cluster.terminate(victim);
    let log_dir = cluster
        .dir
        .path()
        .join(format!("node-{}/replica-1/log", victim + 1));
    let segment = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    assert!(bytes.len() > 200, "the segment holds several records");
    // Inside the first record's payload (after the header and marker slots); later records are
    // whole.
    bytes[picket_storage::format::SEGMENT_HEADER_LEN_V2 + 8 + 2] ^= 0x5a;
    std::fs::write(&segment, bytes).unwrap();
    cluster.spawn(victim);
    // It says so, catches up with the others, and votes and accepts again.
    wait_amnesiac_recovers(&cluster, victim, "corruption", "k19", last).await;
    assert!(log_dir
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("replica-2")
        .exists());
    commits_through(&mut cluster, leader, victim, s, last).await;
}

/// Issue 17's experiment: the leader's last, fsynced log record is cut short while it is down.
/// That is not a torn write (the segment's synced-end marker covers it), so the old leader starts
/// amnesiac in a new generation, re-learns, and is part of a quorum again; it never restarts as
/// an ordinary acceptor without its acknowledged acceptance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_last_synced_record_was_cut_starts_amnesiac() {
    use picket_storage::format::{check_frame, decode_segment_header_any};
    let mut cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let eps = cluster.endpoints.clone();
    let s = create_session(&eps[leader], "svc", 20_000).await;
    let last = hold_keys(&eps, leader, s, 20).await;
    cluster.terminate(leader);
    let log_dir = cluster
        .dir
        .path()
        .join(format!("node-{}/replica-1/log", leader + 1));
    let mut segments: Vec<_> = std::fs::read_dir(&log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segments.sort();
    let segment = segments.last().unwrap();
    let bytes = std::fs::read(segment).unwrap();
    let header = decode_segment_header_any(&bytes).unwrap();
    let mut end = header.data_start;
    while let Ok(frame) = check_frame(&bytes, end, u32::MAX - 64, header.version) {
        end = frame.end();
    }
    assert!(end > header.data_start, "the segment holds records");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(segment)
        .unwrap();
    file.set_len(end as u64 - 3).unwrap();
    drop(file);
    // The others elect a new leader meanwhile; the old one comes back amnesiac.
    cluster.spawn(leader);
    let other = (leader + 1) % 3;
    wait_amnesiac_recovers(&cluster, leader, "synced end", "k19", last).await;
    assert!(log_dir
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("replica-2")
        .exists());
    commits_through(&mut cluster, other, leader, s, last).await;
}

/// A replica whose disk was replaced: `picketd run` refuses the empty data directory and names
/// both flags, creating nothing; `--rejoin` starts it amnesiac, it catches up, and once recovered
/// it is part of a quorum again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_replica_is_refused_without_a_flag_and_rejoins_with_rejoin() {
    // Never compacted: the rejoined replica replays the log from slot 1.
    let mut cluster = Cluster::start_snapshot_every(1_000_000);
    let leader = cluster.leader(ELECTION).await;
    let eps = cluster.endpoints.clone();
    let s = create_session(&eps[leader], "svc", 30_000).await;
    let last = hold_keys(&eps, leader, s, 10).await;
    let victim = (leader + 1) % 3;
    cluster.terminate(victim);
    let data = cluster.dir.path().join(format!("node-{}", victim + 1));
    std::fs::remove_dir_all(&data).unwrap();

    let refused = cluster.command(victim, &[]).output().unwrap();
    assert!(!refused.status.success(), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("holds no replica state")
            && stderr.contains("--init")
            && stderr.contains("--rejoin"),
        "{stderr}"
    );
    assert!(!data.exists(), "a refused start created {}", data.display());

    cluster.spawn_with(victim, &["--rejoin"]);
    wait_amnesiac_recovers(&cluster, victim, "started with --rejoin", "k9", last).await;
    // It replayed the log from slot 1 (nothing was compacted) at the cluster version the
    // log starts at, which only the `--init` replicas had recorded: it learned it from a peer
    // (simulation seed 1017 found it applying at version 1 beside replicas at version 2).
    let version = |endpoint: String| async move {
        status_of(&endpoint)
            .await
            .map(|status| (status.cluster_version, status.slot_applied))
    };
    let (leader_version, _) = version(eps[leader].clone()).await.expect("leader status");
    let (victim_version, victim_applied) =
        version(eps[victim].clone()).await.expect("victim status");
    assert_eq!(leader_version, picket_core::locks::CLUSTER_VERSION);
    assert!(
        victim_applied > 1,
        "the victim applied {victim_applied} slots"
    );
    assert_eq!(
        victim_version, leader_version,
        "the rejoined replica's cluster version"
    );
    // Had it applied the log at version 1, it would also have proposed a step to 2 once it led
    // (recovery makes it lead), which the others refuse as not above theirs, and only its
    // audit would show.
    let log = cluster.log(victim);
    assert!(
        !log.contains("proposed a cluster version step"),
        "the rejoined replica applied the log at another cluster version:\n{log}"
    );
    assert!(
        log.contains("learned the cluster's first membership from a peer"),
        "{log}"
    );
    commits_through(&mut cluster, leader, victim, s, last).await;
}

#[test]
fn picketd_names_the_field_of_a_bad_configuration_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("picket.example.toml"),
    )
    .unwrap();
    let check = |text: &str| {
        let path = dir.path().join("picket.toml");
        std::fs::write(&path, text).unwrap();
        std::process::Command::new(env!("CARGO_BIN_EXE_picketd"))
            .args(["check-config", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    let ok = check(&good);
    assert!(ok.status.success(), "{ok:?}");
    let bad = check(&good.replace("heartbeat_ms = 75", "heartbeat_ms = 900"));
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("timing.election_timeout_ms_min"),
        "{stderr}"
    );
    // `run` refuses it the same way, before touching anything.
    let path = dir.path().join("picket.toml");
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_picketd"))
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("timing.election_timeout_ms_min"));
}
