//! A running `DevCluster` wired for operations: `/metrics` shows the longest hold of a held key,
//! gRPC request counts and fsync latencies; HTTP inspection answers the holder as JSON; admin
//! calls verified as OIDC bearer tokens (a dev issuer) with the two-person rule.
// Real sockets: not under the simulator.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_proto::proto;
use picket_server::auth::dev::DevIssuer;
use picket_server::auth::OidcSection;
use picket_server::dev::{DevCluster, DevOptions};
use support::*;
use tonic::Code;

const NS: &str = "orders";
const KEY: &str = "invoice/42";

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_longest_hold_and_http_inspect_shows_the_holder() {
    let (cluster, leader, at) = dev_cluster_with_leader().await;
    let holder = create_session(&at, "billing-worker", 10_000).await;
    let token = granted(&acquire(&at, holder, 1, NS, KEY, 0).await.unwrap()).unwrap();
    let waiter = create_session(&at, "waiter", 10_000).await;
    // A wait (not a try): the call answers `queued` at its position when the wait ends.
    let queued = acquire(&at, waiter, 1, NS, KEY, 200).await.unwrap();
    assert!(granted(&queued).is_none(), "the key is held: {queued:?}");

    // The namespace series are recomputed every second; the hold ages meanwhile.
    let http = cluster.http_endpoint(leader);
    let key_label = format!("key=\"{KEY}\"");
    let ns_label = format!("namespace=\"{NS}\"");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (status, text) = get(&format!("{http}/metrics")).await;
        assert_eq!(status, 200);
        let held = sample(
            &text,
            "picket_longest_hold_seconds",
            &[&ns_label, &key_label],
        );
        if held.is_some_and(|s| s > 0.5) {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no longest hold for {KEY} in:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        sample(
            &text,
            "picket_longest_hold_queue_depth",
            &[&ns_label, &key_label]
        ),
        Some(1.0)
    );
    assert_eq!(sample(&text, "picket_holds", &[&ns_label]), Some(1.0));
    assert_eq!(sample(&text, "picket_sessions", &[]), Some(2.0));
    assert_eq!(
        sample(&text, "picket_paxos_role", &["role=\"leader\""]),
        Some(1.0)
    );
    assert!(sample(&text, "picket_paxos_slot_applied", &[]).is_some_and(|s| s >= 4.0));
    assert!(sample(&text, "picket_storage_fsync_seconds_count", &[]).is_some_and(|n| n >= 1.0));
    // The leader talked to its followers over the peer transport, and no push was dropped.
    assert!(sample(&text, "picket_peer_messages_sent_total", &[]).is_some_and(|n| n >= 1.0));
    assert!(
        sample(&text, "picket_peer_connects_total", &[]).is_some_and(|n| n >= 1.0)
            || sample(&text, "picket_peer_accepts_total", &[]).is_some_and(|n| n >= 1.0)
    );
    assert_eq!(
        sample(
            &text,
            "picket_peer_messages_dropped_total",
            &["reason=\"malformed\""]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "picket_session_pushes_dropped_total", &[]),
        Some(0.0)
    );
    assert!(
        sample(
            &text,
            "picket_grpc_requests_total",
            &["method=\"/picket.v1.Lock/Acquire\"", "code=\"OK\""]
        )
        .is_some_and(|n| n >= 2.0),
        "{text}"
    );

    // Linearizable inspection at the leader: the holder, its token and the waiter.
    let (status, body) = get(&format!("{http}/v1/namespaces/{NS}/locks/{KEY}")).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["holder"]["identity"]["name"], "billing-worker");
    assert_eq!(json["holder"]["session_id"], holder);
    assert_eq!(json["holder"]["token"], token);
    assert_eq!(json["queue_depth"], 1);
    assert_eq!(json["stale"], false);

    // A follower answers a linearizable read too, through the leader (the alert links may name
    // any replica), and a stale one from its own state.
    let follower = (leader + 1) % 3;
    let follower_http = cluster.http_endpoint(follower);
    let response = reqwest::get(format!("{follower_http}/v1/namespaces/{NS}/locks/{KEY}"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["picket-node"],
        (leader + 1).to_string(),
        "answered by the leader"
    );
    let json: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(json["holder"]["token"], token);
    assert_eq!(json["stale"], false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body) = get(&format!(
            "{follower_http}/v1/namespaces/{NS}/locks/{KEY}?stale=true"
        ))
        .await;
        assert_eq!(status, 200, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        if json["holder"]["token"] == token {
            assert_eq!(json["stale"], true);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = get(&format!("{http}/healthz")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"role\":\"leader\""), "{body}");
    // The membership: every configured member with its client endpoint, in /healthz and as a
    // count in /metrics.
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    let members = health["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{body}");
    for (i, member) in members.iter().enumerate() {
        assert_eq!(
            member["client_endpoint"],
            cluster.client_endpoint(i),
            "{body}"
        );
    }
    // In /metrics: the voters and learners of the membership the log scheduled, its revision,
    // and on the leader how far behind each other member is (reported once a second).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let (_, text) = get(&format!("{http}/metrics")).await;
        let lags: Vec<Option<f64>> = (0..3)
            .filter(|i| *i != leader)
            .map(|i| {
                let label = format!("node_id=\"{}\"", i + 1);
                sample(&text, "picket_cluster_member_lag_slots", &[&label])
            })
            .collect();
        if lags.iter().all(|lag| lag.is_some_and(|slots| slots >= 0.0)) {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no lag series of both followers: {text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        sample(&text, "picket_cluster_members", &[]),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "picket_cluster_learners", &[]),
        Some(0.0),
        "{text}"
    );
    assert!(
        sample(&text, "picket_cluster_config_revision", &[]).is_some(),
        "{text}"
    );
    let own = format!("node_id=\"{}\"", leader + 1);
    assert_eq!(
        sample(&text, "picket_cluster_member_lag_slots", &[&own]),
        None,
        "the leader lists no lag of its own: {text}"
    );
    cluster.shutdown().await;
}

fn bearer<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_tokens_authenticate_admin_calls_and_the_two_person_rule_holds() {
    let dir = tempfile::tempdir().unwrap();
    let issuer = DevIssuer::generate("https://picket-dev.invalid", "picket").unwrap();
    let jwks = dir.path().join("jwks.json");
    issuer.write_jwks(&jwks).unwrap();
    let section: OidcSection = serde_json::from_value(serde_json::json!({
        "issuer": issuer.issuer(), "audiences": [issuer.audience()], "jwks_file": jwks,
    }))
    .unwrap();
    let cluster = DevCluster::start_with(DevOptions {
        oidc: Some(section),
        ..DevOptions::default()
    })
    .await
    .unwrap();
    let leader = cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .unwrap();
    let at = cluster.client_endpoint(leader);
    let hour = Duration::from_secs(3600);
    let alice = issuer.mint("alice", &["picket-operator"], hour);
    let bob = issuer.mint("bob", &["picket-operator:orders"], hour);
    // Lock calls need a lock-client role with OIDC on (none, or an operator role, is refused).
    let svc = issuer.mint("svc-stuck", &["picket-client"], hour);
    let mut locks = lock(&at).await.unwrap();
    let create = proto::CreateSessionRequest {
        ttl_ms: Some(10_000),
        identity: Some(proto::ClientIdentity {
            name: "stuck".into(),
            host: "test".into(),
            pid: std::process::id(),
        }),
        // None: the replica draws the secret and returns it once.
        session_secret: Vec::new(),
    };
    let refused = locks.create_session(create.clone()).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    let refused = locks
        .create_session(bearer(create.clone(), &alice))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("picket-client"), "{refused:?}");
    let created = locks
        .create_session(bearer(create, &svc))
        .await
        .unwrap()
        .into_inner();
    let (s, secret) = (created.session_id, created.session_secret);
    let acquired = locks
        .acquire(bearer(
            try_acquire_request(s, 1, NS, KEY, secret.clone()),
            &svc,
        ))
        .await
        .unwrap()
        .into_inner();
    let t = granted(&acquired).unwrap();
    let mut client = admin(&at).await.unwrap();
    let request = force_release_request(NS, KEY, t, "holder renews but never releases", true);

    // Metadata claims are not believed with OIDC on; a forged token is refused.
    let mut claimed = tonic::Request::new(request.clone());
    claimed
        .metadata_mut()
        .insert("x-picket-principal", "alice".parse().unwrap());
    claimed
        .metadata_mut()
        .insert("x-picket-roles", "picket-operator".parse().unwrap());
    let refused = client.request_force_release(claimed).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    let other = DevIssuer::generate(issuer.issuer(), issuer.audience()).unwrap();
    let forged = other.mint("mallory", &["picket-admin"], hour);
    let refused = client
        .request_force_release(bearer(request.clone(), &forged))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");

    let requested = client
        .request_force_release(bearer(request, &alice))
        .await
        .unwrap()
        .into_inner();
    let approve = |token: &str| bearer(approval_of(&requested), token);
    let refused = client
        .approve_force_release(approve(&alice))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert_eq!(rule(&refused), "approver_is_requester");
    // Bob's role is scoped to `orders`: it counts because the request is on `orders`.
    let approved = client
        .approve_force_release(approve(&bob))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(approved.released_token, t);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(proto::KeepAliveRequest {
        session_id: s,
        seq: 1,
        session_secret: secret.clone(),
    })
    .await
    .unwrap();
    let mut answers = locks
        .keep_alive(bearer(
            picket_server::api::stream::ChannelStream::new(rx),
            &svc,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(answers.message().await.unwrap().unwrap().lost);
    // Admin reads need a valid token too (any role).
    let audit_request = proto::QueryAuditRequest {
        namespace: Some(NS.into()),
        ..Default::default()
    };
    let refused = client.query_audit(audit_request.clone()).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    assert_eq!(rule(&refused), "missing_token");
    let audit = client
        .query_audit(bearer(audit_request, &bob))
        .await
        .unwrap()
        .into_inner();
    let text = format!("{audit:?}");
    assert!(text.contains("alice") && text.contains("bob"), "{text}");
    assert!(text.contains("holder renews but never releases"), "{text}");
    cluster.shutdown().await;
}
