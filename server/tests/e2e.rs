//! End-to-end: three real `picketd` processes on loopback (spawned from the built binary, killed
//! by PID when the test ends).
// Real processes, sockets and TLS: not under the simulator.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_net::proto;
use support::*;
use tonic::Code;

const NS: &str = "orders";
const ELECTION: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_locks_fifo_handoff_and_rising_tokens() {
    let cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let at = cluster.endpoints[leader].clone();

    // A follower refuses with the leader's client endpoint, in details and metadata.
    let follower = (leader + 1) % 3;
    // (It learns who leads from the leader's first heartbeat: ask until it knows.)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let status = loop {
        let status = try_create_session(&cluster.endpoints[follower], "svc", 10_000)
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        let hint = picket_net::status::leader_hint(&status).unwrap();
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
    let cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let at = cluster.endpoints[leader].clone();
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
}

/// One client acquires new keys in a loop, following the leader, while the leader is killed:
/// every acknowledged grant is still held afterwards with its token, and tokens rose in the
/// order they were acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_acquire_is_lost_when_the_leader_is_killed_under_load() {
    let mut cluster = Cluster::start();
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
                    let hint = picket_net::status::leader_hint(&status)
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
