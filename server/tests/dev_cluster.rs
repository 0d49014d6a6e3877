//! `DevCluster` (three replicas in this process): watch, admin calls with dev auth, and a member
//! stopped and restarted.
// Real processes, sockets and TLS: not under the simulator.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_proto::proto;
use support::*;
use tonic::Code;

const NS: &str = "payments";

fn with_actor<T>(message: T, principal: &str, roles: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("x-picket-principal", principal.parse().unwrap());
    request
        .metadata_mut()
        .insert("x-picket-roles", roles.parse().unwrap());
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_the_lock_log_and_resumes() {
    let (cluster, leader, at) = dev_cluster_with_leader().await;
    let s = create_session(&at, "svc", 10_000).await;
    let t = granted(&acquire(&at, s, 1, NS, "a/1", 0).await.unwrap()).unwrap();
    // Watch from a follower (served from its applied state), prefix "a/".
    let follower = cluster.client_endpoint((leader + 1) % 3);
    let mut client = lock(&follower).await.unwrap();
    let mut stream = client
        .watch(proto::WatchRequest {
            namespace: Some(NS.into()),
            key_prefix: "a/".into(),
            from_revision: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let page = stream.message().await.unwrap().unwrap();
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].revision, t);
    // Events after the stream opened arrive on it; keys outside the prefix do not.
    acquire(&at, s, 2, NS, "b/1", 0).await.unwrap();
    release(&at, s, 3, NS, "a/1", t).await.unwrap();
    let page = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(page.events.iter().all(|e| e.key == "a/1"), "{page:?}");
    assert!(page.events.iter().all(|e| e.revision > t));
    // Resuming from `resume_from` sees nothing twice.
    let mut again = client
        .watch(proto::WatchRequest {
            namespace: Some(NS.into()),
            key_prefix: "a/".into(),
            from_revision: page.resume_from,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let none = tokio::time::timeout(Duration::from_millis(300), again.message()).await;
    assert!(none.is_err(), "no event after resume_from yet: {none:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_needs_two_people_and_raises_the_floor() {
    let (cluster, _, at) = dev_cluster_with_leader().await;
    let s = create_session(&at, "stuck", 10_000).await;
    let t = granted(&acquire(&at, s, 1, NS, "ledger", 0).await.unwrap()).unwrap();
    let mut admin_client = admin(&at).await.unwrap();
    let requested = admin_client
        .request_force_release(with_actor(
            force_release_request(NS, "ledger", t, "holder is wedged", true),
            "alice",
            "on-call",
        ))
        .await
        .unwrap()
        .into_inner();
    let approve = |who: &str| with_actor(approval_of(&requested), who, "on-call");
    let status = admin_client
        .approve_force_release(approve("alice"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    assert_eq!(rule(&status), "approver_is_requester");
    let approved = admin_client
        .approve_force_release(approve("bob"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(approved.released_token, t);
    assert_eq!(approved.session_revoked, Some(s));
    assert!(
        keepalive(&at, s).await.unwrap().lost,
        "the revoked session is lost"
    );
    let s2 = create_session(&at, "next", 10_000).await;
    let t2 = granted(&acquire(&at, s2, 1, NS, "ledger", 0).await.unwrap()).unwrap();
    assert!(t2 > approved.floor, "the next token is above the floor");
    let audit = admin_client
        .query_audit(proto::QueryAuditRequest {
            namespace: Some(NS.into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(audit.records.len() >= 2, "{audit:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stops_and_restarts_from_its_data() {
    let (mut cluster, leader, at) = dev_cluster_with_leader().await;
    assert_eq!(cluster.client_endpoints().len(), 3);
    let s = create_session(&at, "svc", 10_000).await;
    let t = granted(&acquire(&at, s, 1, NS, "k", 0).await.unwrap()).unwrap();
    let boot_before = cluster.node(leader).unwrap().boot;
    cluster.stop(leader).await;
    assert!(!cluster.is_running(leader));
    let next = cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .unwrap();
    assert_ne!(next, leader);
    cluster.restart(leader).await.unwrap();
    assert_eq!(cluster.node(leader).unwrap().boot, boot_before + 1);
    let info = inspect(&cluster.client_endpoint(next), NS, "k", false)
        .await
        .unwrap();
    assert_eq!(info.holder.unwrap().token, t);
    cluster.shutdown().await;
}

/// One frame of the peer protocol (`peer.proto`: a 4-byte big-endian length, then the
/// `PeerFrame`), written as another language's replica would.
async fn write_frame(tcp: &mut tokio::net::TcpStream, frame: proto::PeerFrame) {
    use prost::Message as _;
    use tokio::io::AsyncWriteExt;
    let bytes = frame.encode_to_vec();
    tcp.write_all(&(bytes.len() as u32).to_be_bytes())
        .await
        .unwrap();
    tcp.write_all(&bytes).await.unwrap();
}

/// The next frame, `None` when the connection ends.
async fn read_frame(tcp: &mut tokio::net::TcpStream) -> Option<proto::peer_frame::Kind> {
    use prost::Message as _;
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 4];
    tcp.read_exact(&mut len).await.ok()?;
    let mut bytes = vec![0u8; u32::from_be_bytes(len) as usize];
    tcp.read_exact(&mut bytes).await.ok()?;
    proto::PeerFrame::decode(bytes.as_slice()).unwrap().kind
}

fn hello(version: u32, cluster: &str, from: u64, to: u64) -> proto::PeerFrame {
    proto::PeerFrame {
        kind: Some(proto::peer_frame::Kind::Hello(proto::PeerHello {
            protocol_version: version,
            cluster_id: cluster.into(),
            from_node_id: from,
            to_node_id: to,
            release: env!("CARGO_PKG_VERSION").into(),
            cluster_version_max: picket_core::locks::CLUSTER_VERSION,
            ..proto::PeerHello::default()
        })),
    }
}

/// `frame`'s hello as a replica of release 0.1 sends it: no release, no cluster version.
fn release_0_1(frame: proto::PeerFrame) -> proto::PeerFrame {
    match frame.kind {
        Some(proto::peer_frame::Kind::Hello(hello)) => proto::PeerFrame {
            kind: Some(proto::peer_frame::Kind::Hello(proto::PeerHello {
                release: String::new(),
                cluster_version_max: 0,
                ..hello
            })),
        },
        other => panic!("not a hello: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_port_refuses_a_bad_handshake_and_drops_malformed_messages() {
    use proto::peer_frame::Kind;
    let (cluster, leader, _) = dev_cluster_with_leader().await;
    let peer = cluster.config(0).me().peer_address.clone();
    let version = picket_proto::PEER_PROTOCOL_VERSION;
    for (bad, rule) in [
        (hello(version, "other", 2, 1), "peer_cluster_id"),
        (
            hello(version + 1, "picket-dev", 2, 1),
            "peer_protocol_version",
        ),
        (hello(version, "picket-dev", 2, 3), "peer_wrong_recipient"),
        // A replica of release 0.1 (its hello names no cluster version) is kept out of a
        // cluster whose log is at cluster version 2 (a new cluster of this release).
        (
            release_0_1(hello(version, "picket-dev", 2, 1)),
            "peer_cluster_version",
        ),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(&peer).await.unwrap();
        write_frame(&mut tcp, bad).await;
        match read_frame(&mut tcp).await {
            Some(Kind::Refusal(refusal)) => assert_eq!(refusal.rule, rule, "{refusal:?}"),
            other => panic!("expected a refusal naming {rule}, got {other:?}"),
        }
        assert_eq!(read_frame(&mut tcp).await, None, "closed after the refusal");
    }
    // A good handshake, then a malformed message: dropped and counted, the connection goes on.
    let mut tcp = tokio::net::TcpStream::connect(&peer).await.unwrap();
    write_frame(&mut tcp, hello(version, "picket-dev", 2, 1)).await;
    match read_frame(&mut tcp).await {
        Some(Kind::Hello(answer)) => {
            assert_eq!((answer.from_node_id, answer.to_node_id), (1, 2));
        }
        other => panic!("expected the listener's hello, got {other:?}"),
    }
    let counters = &cluster.node(0).unwrap().peer_counters;
    let malformed = || {
        counters
            .messages_dropped_malformed
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = malformed();
    let message = proto::PeerFrame {
        kind: Some(Kind::Message(proto::PeerMessage { kind: None })),
    };
    write_frame(&mut tcp, message).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while malformed() == before {
        assert!(tokio::time::Instant::now() < deadline, "never counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The cluster is unharmed.
    let at = cluster.client_endpoint(leader);
    let s = create_session(&at, "svc", 10_000).await;
    assert!(granted(&acquire(&at, s, 1, NS, "k", 0).await.unwrap()).is_some());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_not_kept_alive_expires_and_its_waiter_is_granted() {
    let (cluster, _, at) = dev_cluster_with_leader().await;
    let quiet = create_session(&at, "quiet", 1_000).await;
    let live = create_session(&at, "live", 10_000).await;
    let t1 = granted(&acquire(&at, quiet, 1, NS, "k", 0).await.unwrap()).unwrap();
    // `live` keeps its session alive over one stream while its acquire is held.
    let ka_at = at.clone();
    let keeper = tokio::spawn(async move {
        let mut client = lock(&ka_at).await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut answers = client
            .keep_alive(picket_server::api::stream::ChannelStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        for seq in 1..=10u64 {
            tx.send(proto::KeepAliveRequest {
                session_id: live,
                seq,
                session_secret: secret_of(&ka_at, live),
            })
            .await
            .unwrap();
            let answer = answers.message().await.unwrap().unwrap();
            assert_eq!((answer.seq, answer.lost), (seq, false));
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let started = tokio::time::Instant::now();
    let reply = acquire(&at, live, 1, NS, "k", 8_000).await.unwrap();
    let t2 = granted(&reply).expect("granted when the quiet session expired");
    assert!(t2 > t1);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert!(
        keepalive(&at, quiet).await.unwrap().lost,
        "the quiet session expired"
    );
    keeper.await.unwrap();
    cluster.shutdown().await;
}

fn rule_of(status: &tonic::Status) -> String {
    picket_proto::status::error_detail(status)
        .map(|d| d.rule)
        .unwrap_or_default()
}

/// Asks for a membership change until the one before is in effect (refused with
/// `membership_change_in_progress` until then, up to 10 s); any other refusal fails the test.
async fn once_in_effect<F, Fut>(ask: F) -> proto::MembershipChangeResponse
where
    F: Fn() -> Fut,
    Fut: std::future::Future<
        Output = Result<tonic::Response<proto::MembershipChangeResponse>, tonic::Status>,
    >,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match ask().await {
            Ok(answer) => return answer.into_inner(),
            Err(status)
                if rule_of(&status) == "membership_change_in_progress"
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
}

/// `/metrics` of `http` as text.
async fn metrics(http: &str) -> String {
    reqwest::get(format!("{http}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// What `picketd dev-join` does, in this process: a replica that joins the dev cluster is added
/// as a learner, promoted once it follows the log and removed again, and `/metrics` shows the
/// membership, its revision and the learner's lag as it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_replica_is_added_promoted_and_removed() {
    let (mut cluster, leader, at) = dev_cluster_with_leader().await;
    let s = create_session(&at, "svc", 10_000).await;
    acquire(&at, s, 1, NS, "a/1", 0).await.unwrap();
    let four = cluster
        .start_joiner(&picket_server::dev::DevOptions::default(), 4)
        .await
        .unwrap();
    let me = cluster.config(four).me().clone();
    let revision_before = sample(
        &metrics(&cluster.http_endpoint(leader)).await,
        "picket_cluster_config_revision",
        &[],
    )
    .unwrap();
    let mut admin_client = admin(&at).await.unwrap();
    let add = proto::AddMemberRequest {
        node_id: 4,
        peer_address: me.peer_address.clone(),
        client_address: me.client_address.clone(),
        http_address: me.http_address.clone().unwrap(),
        reason: "try it".into(),
    };
    let added = admin_client
        .add_member(with_actor(add.clone(), "alice", "class-admin"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((added.voters, added.learners), (vec![1, 2, 3], vec![4]));
    // Asked again (a retry whose answer was lost), the same add is answered as done.
    let again = admin_client
        .add_member(with_actor(add, "alice", "class-admin"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.learners, vec![4]);
    assert_eq!(again.from_slot, added.from_slot);
    // Its HTTP address travelled in the log: the leader forwards to it and lists it.
    let health = reqwest::get(format!("{}/healthz", cluster.http_endpoint(leader)))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let health: serde_json::Value = serde_json::from_str(&health).unwrap();
    let listed = health["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["node_id"] == 4)
        .cloned()
        .unwrap_or_else(|| panic!("{health}"));
    assert_eq!(listed["voter"], false, "{health}");
    assert_eq!(
        listed["http_endpoint"],
        format!("http://{}", me.http_address.clone().unwrap()),
        "{health}"
    );

    // The learner follows: the leader's /metrics lists it with its lag, and the revision rose.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = metrics(&cluster.http_endpoint(leader)).await;
        let lag = sample(&text, "picket_cluster_member_lag_slots", &["node_id=\"4\""]);
        if lag.is_some_and(|lag| lag <= 8.0) {
            assert_eq!(sample(&text, "picket_cluster_learners", &[]), Some(1.0));
            assert_eq!(sample(&text, "picket_cluster_members", &[]), Some(3.0));
            let revision = sample(&text, "picket_cluster_config_revision", &[]).unwrap();
            assert!(
                revision > revision_before,
                "{revision} after {revision_before}"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The add is not in effect until α slots after it (the leader fills them).
    let promoted = once_in_effect(|| {
        let mut admin_client = admin_client.clone();
        async move {
            let request = proto::PromoteMemberRequest {
                node_id: 4,
                reason: "caught up".into(),
                force: false,
            };
            let asked = with_actor(request, "alice", "class-admin");
            admin_client.promote_member(asked).await
        }
    })
    .await;
    assert_eq!(promoted.voters, vec![1, 2, 3, 4]);

    // The new voter serves reads of what the cluster granted before it joined.
    let mut from_four = admin(&cluster.client_endpoint(four)).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = from_four
            .inspect(proto::InspectRequest {
                namespace: NS.into(),
                key: "a/1".into(),
                allow_stale: true,
            })
            .await
            .unwrap()
            .into_inner();
        if info.holder.is_some() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{info:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let removed = once_in_effect(|| {
        let mut admin_client = admin_client.clone();
        async move {
            let request = proto::RemoveMemberRequest {
                node_id: 4,
                reason: "done trying".into(),
                force: false,
            };
            let asked = with_actor(request, "alice", "class-admin");
            admin_client.remove_member(asked).await
        }
    })
    .await;
    assert_eq!((removed.voters, removed.learners), (vec![1, 2, 3], vec![]));
    let text = metrics(&cluster.http_endpoint(leader)).await;
    assert_eq!(sample(&text, "picket_cluster_members", &[]), Some(3.0));
    cluster.shutdown().await;
}
