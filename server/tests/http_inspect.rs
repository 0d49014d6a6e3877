//! The HTTP endpoint against a fake inspection source: JSON shapes, stale flag, errors, metrics,
//! and a follower's reads (forwarded to the leader over real HTTP, or answered stale).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use picket_core::locks::{
    ClassSpec, ForceReleaseId, ForceReleaseRequest, HoldInfo, Identity, KeyInfo, LockError,
    LockMode, Revision, SessionId, Token, WaiterInfo,
};
use picket_core::time::Instant;
use picket_proto::status::{lock_error_status, not_leader_status, LeaderHint};
use picket_server::api::http::{
    replica_router, router, BoxFuture, Health, HttpCluster, InspectSource,
};
use picket_server::auth::Authenticator;
use picket_server::metrics::{Metrics, NamespaceStats, PagedHold};
use serde_json::Value;
use tonic::Status;
use tower::ServiceExt;

fn identity(name: &str) -> Identity {
    Identity {
        name: name.to_owned(),
        host: "web-1".to_owned(),
        pid: 4242,
        principal: "svc-orders".to_owned(),
    }
}

fn class() -> ClassSpec {
    ClassSpec {
        name: "payments".to_owned(),
        prefix: "order/".to_owned(),
        fenced: true,
        session_ttl_ms_default: 10_000,
        session_ttl_ms_max: 30_000,
        hold_ms_max_expected: 600_000,
        owner: "team-orders".to_owned(),
        runbook_url: "https://runbooks.example.invalid/orders".to_owned(),
        description: "order ledger writes".to_owned(),
    }
}

fn hold(key: &str) -> HoldInfo {
    HoldInfo {
        namespace: "orders".to_owned(),
        key: key.to_owned(),
        session: SessionId(7),
        identity: identity("ledger-writer"),
        token: Token(41),
        granted_at: Instant::from_millis(1_000),
        held_for_ms: 900_000,
        session_ttl_ms: 10_000,
        session_remaining_ms: Some(8_500),
        hold_ms_max_expected: 600_000,
        mode: LockMode::Exclusive,
        permit: None,
    }
}

fn key_info() -> KeyInfo {
    KeyInfo {
        revision: Revision(57),
        namespace: "orders".to_owned(),
        key: "order/17".to_owned(),
        class: class(),
        holder: Some(hold("order/17")),
        queue_depth: 1,
        waiters: vec![WaiterInfo {
            session: SessionId(9),
            identity: identity("ledger-writer-2"),
            position: 1,
            queued_at: Instant::from_millis(5_000),
            waiting_for_ms: 896_000,
            mode: LockMode::Exclusive,
        }],
        floor: Some(Revision(41)),
        permits: None,
        permit_floors: vec![],
        pending_force_releases: vec![ForceReleaseRequest {
            id: ForceReleaseId(55),
            namespace: "orders".to_owned(),
            key: "order/17".to_owned(),
            holder: SessionId(7),
            token: Token(41),
            requester: "alice".to_owned(),
            requester_roles: Default::default(),
            reason: "INC-123 holder stuck".to_owned(),
            revoke_session: true,
            checklist: Default::default(),
            holder_identity: Default::default(),
            fenced: true,
            safety: ClassSpec::safety_statement(true),
            requested_at: Instant::from_millis(800_000),
            expires_at: Instant::from_millis(1_400_000),
        }],
        holders: vec![hold("order/17")],
        mode: Some(LockMode::Exclusive),
    }
}

/// Answers from fixed data and remembers the calls.
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<String>>,
    /// `Some(leader)`: a follower, which refuses linearizable reads with `not_leader` naming
    /// `leader` (and its gRPC address), and answers stale ones at revision 50.
    follower_of: Option<Option<u64>>,
}

impl Fake {
    fn follower(leader: Option<u64>) -> Fake {
        Fake {
            follower_of: Some(leader),
            ..Fake::default()
        }
    }

    fn refuses(&self, allow_stale: bool) -> Option<Status> {
        let leader = self.follower_of.filter(|_| !allow_stale)?;
        Some(not_leader_status(&LeaderHint {
            node_id: leader,
            endpoint: leader.map(|l| format!("http://10.0.0.{l}:7401")),
        }))
    }
}

impl InspectSource for Fake {
    fn inspect(
        &self,
        namespace: String,
        key: String,
        allow_stale: bool,
    ) -> BoxFuture<'_, Result<KeyInfo, Status>> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("inspect {namespace} {key} stale={allow_stale}"));
        let refused = self.refuses(allow_stale);
        let follower = self.follower_of.is_some();
        Box::pin(async move {
            if let Some(status) = refused {
                return Err(status);
            }
            match (namespace.as_str(), key.as_str()) {
                ("orders", "order/17") if follower => Ok(KeyInfo {
                    revision: Revision(50),
                    ..key_info()
                }),
                ("orders", "order/17") => Ok(key_info()),
                ("follower", _) => Err(not_leader_status(&LeaderHint {
                    node_id: Some(2),
                    endpoint: Some("http://10.0.0.2:7401".to_owned()),
                })),
                _ => Err(lock_error_status(&LockError::UnknownSession {
                    session: SessionId(1),
                })),
            }
        })
    }

    fn list_holds(
        &self,
        namespace: String,
        limit: usize,
        allow_stale: bool,
    ) -> BoxFuture<'_, Result<Vec<HoldInfo>, Status>> {
        self.calls.lock().unwrap().push(format!(
            "holds {namespace} limit={limit} stale={allow_stale}"
        ));
        let refused = self.refuses(allow_stale);
        Box::pin(async move {
            match refused {
                Some(status) => Err(status),
                None => Ok(vec![hold("order/17"), hold("order/18")]),
            }
        })
    }

    fn health(&self) -> BoxFuture<'_, Health> {
        Box::pin(async move {
            Health {
                ready: true,
                node_id: 1,
                role: "leader".to_owned(),
                leader_node_id: Some(1),
                slot_applied: 120,
                detail: String::new(),
                storage: picket_server::node::durable::StorageCondition {
                    recovery: "torn_tail_cut".to_owned(),
                    torn_tail_bytes: 17,
                    generation_dir: "/data/replica-1".to_owned(),
                    ..Default::default()
                },
                members: vec![picket_server::api::http::HealthMember {
                    node_id: 1,
                    client_endpoint: "http://127.0.0.1:7401".to_owned(),
                    http_endpoint: "http://127.0.0.1:7481".to_owned(),
                    voter: true,
                    slot_applied: Some(120),
                }],
                membership_from_slot: 1,
            }
        })
    }
}

async fn get(app: axum::Router, uri: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    get_with(app, Request::get(uri).body(Body::empty()).unwrap()).await
}

async fn get_with(
    app: axum::Router,
    request: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

fn app() -> (axum::Router, Arc<Fake>, Arc<Metrics>) {
    let fake = Arc::new(Fake::default());
    let metrics = Arc::new(Metrics::new());
    (router(fake.clone(), metrics.clone()), fake, metrics)
}

#[tokio::test]
async fn inspect_returns_the_documented_json_linearizable_by_default() {
    let (app, fake, _) = app();
    let (status, _, body) = get(app.clone(), "/v1/namespaces/orders/locks/order/17").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["revision"], 57);
    assert_eq!(v["key"], "order/17");
    assert_eq!(v["stale"], false);
    assert_eq!(v["class"]["name"], "payments");
    assert_eq!(v["class"]["fenced"], true);
    assert_eq!(
        v["class"]["runbook_url"],
        "https://runbooks.example.invalid/orders"
    );
    assert_eq!(v["holder"]["token"], 41);
    assert_eq!(v["holder"]["session_id"], 7);
    assert_eq!(v["holder"]["identity"]["host"], "web-1");
    assert_eq!(v["holder"]["identity"]["pid"], 4242);
    assert_eq!(v["holder"]["held_for_ms"], 900_000);
    assert_eq!(v["holder"]["session_remaining_ms"], 8_500);
    assert_eq!(v["queue_depth"], 1);
    assert_eq!(v["waiters"][0]["position"], 1);
    assert_eq!(v["floor"], 41);
    assert_eq!(v["pending_force_releases"][0]["id"], 55);
    assert_eq!(v["pending_force_releases"][0]["requester"], "alice");
    assert!(
        v["pending_force_releases"][0]["safety"]
            .as_str()
            .unwrap()
            .len()
            > 10
    );

    // Percent-encoded keys arrive decoded; ?stale=true asks for a local read.
    let (status, _, body) = get(app, "/v1/namespaces/orders/locks/order%2F17?stale=true").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["stale"], true);
    assert_eq!(
        *fake.calls.lock().unwrap(),
        [
            "inspect orders order/17 stale=false",
            "inspect orders order/17 stale=true"
        ]
    );
}

#[tokio::test]
async fn holds_are_listed_with_limits() {
    let (app, fake, _) = app();
    let (status, _, body) = get(app.clone(), "/v1/namespaces/orders/holds").await;
    assert_eq!(status, StatusCode::OK);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["namespace"], "orders");
    assert_eq!(v["holds"].as_array().unwrap().len(), 2);
    assert_eq!(v["holds"][1]["key"], "order/18");
    let (status, _, _) = get(
        app.clone(),
        "/v1/namespaces/orders/holds?limit=5&stale=true",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, body) = get(app.clone(), "/v1/namespaces/orders/holds?limit=10001").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("10000"), "{body}");
    // Every bad parameter is the documented JSON error with its rule and the parameter at
    // fault (docs/http.md, "Errors"), not a framework message in plain text, and reads nothing.
    for (path, field) in [
        ("/v1/namespaces/orders/holds?limit=10001", "limit"),
        ("/v1/namespaces/orders/holds?limit=abc", "limit"),
        ("/v1/namespaces/orders/holds?stale=maybe", "stale"),
        (
            "/v1/namespaces/orders/locks/order%2F17?stale=maybe",
            "stale",
        ),
    ] {
        let (status, headers, body) = get(app.clone(), path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert!(
            headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{path}: {headers:?}"
        );
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], "invalid_argument", "{path}: {body}");
        assert_eq!(v["error"]["rule"], "invalid_argument", "{path}: {body}");
        assert_eq!(v["error"]["field"], field, "{path}: {body}");
    }
    assert_eq!(
        *fake.calls.lock().unwrap(),
        [
            "holds orders limit=1000 stale=false",
            "holds orders limit=5 stale=true"
        ]
    );
}

#[tokio::test]
async fn errors_are_json_with_rule_and_an_http_leader_hint() {
    // A read forwarded to a replica that is no longer leader: it does not forward again, and its
    // hint names the leader's HTTP address (the gRPC one does not speak HTTP/1).
    let fake = Arc::new(Fake::follower(Some(2)));
    let forwarded_to = replica_router(
        fake.clone(),
        Arc::new(Metrics::new()),
        Authenticator::disabled(),
        cluster(3, None),
    );
    let request = Request::get("/v1/namespaces/orders/locks/k")
        .header("picket-forwarded-by", "1")
        .body(Body::empty())
        .unwrap();
    let (status, headers, body) = get_with(forwarded_to, request).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["picket-leader"], "http://10.0.0.2:7481");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "unavailable");
    assert_eq!(v["error"]["rule"], "not_leader");
    assert_eq!(v["error"]["leader_endpoint"], "http://10.0.0.2:7481");
    assert_eq!(v["error"]["leader_node_id"], 2);
    assert_eq!(
        v["error"]["message"],
        "not the leader: retry at http://10.0.0.2:7481"
    );
    assert_eq!(v["error"]["retryable"], true);
    assert_eq!(
        *fake.calls.lock().unwrap(),
        ["inspect orders k stale=false"]
    );

    let (app, _, _) = app();
    let (status, _, body) = get(app, "/v1/namespaces/orders/locks/other").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["rule"], "unknown_session");
}

/// Replica `me` of a cluster whose members 1..=3 have HTTP addresses `http://10.0.0.N:7481`,
/// except member 2 at `leader` when given.
fn cluster(me: u64, leader: Option<String>) -> HttpCluster {
    let mut endpoints: std::collections::BTreeMap<u64, String> = (1..=3)
        .map(|n| (n, format!("http://10.0.0.{n}:7481")))
        .collect();
    if let Some(leader) = leader {
        endpoints.insert(2, leader);
    }
    HttpCluster {
        node_id: me,
        endpoints: picket_server::api::http::HttpEndpoints::new(endpoints),
        forward_ca_pem: None,
    }
}

#[tokio::test]
async fn a_follower_forwards_reads_to_the_leader_over_http() {
    // The leader: a real HTTP server on loopback.
    let leader = Arc::new(Fake::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let leader_url = format!("http://{}", listener.local_addr().unwrap());
    let leader_app = replica_router(
        leader.clone(),
        Arc::new(Metrics::new()),
        Authenticator::disabled(),
        cluster(2, Some(leader_url.clone())),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(picket_server::api::http::serve(
        listener,
        leader_app,
        async {
            let _ = stopped.await;
        },
    ));

    let follower = Arc::new(Fake::follower(Some(2)));
    let app = replica_router(
        follower.clone(),
        Arc::new(Metrics::new()),
        Authenticator::disabled(),
        cluster(1, Some(leader_url)),
    );
    let (status, headers, body) = get(app.clone(), "/v1/namespaces/orders/locks/order%2F17").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers["picket-node"], "2", "answered by the leader");
    assert!(headers.get("picket-stale").is_none());
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        v["revision"], 57,
        "the leader's state, not the follower's 50"
    );
    assert_eq!(v["stale"], false);
    assert_eq!(v["stale_reason"], Value::Null);
    let (status, headers, body) = get(app, "/v1/namespaces/orders/holds?limit=5").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers["picket-node"], "2");
    assert_eq!(
        *follower.calls.lock().unwrap(),
        [
            "inspect orders order/17 stale=false",
            "holds orders limit=5 stale=false"
        ]
    );
    assert_eq!(
        *leader.calls.lock().unwrap(),
        [
            "inspect orders order/17 stale=false",
            "holds orders limit=5 stale=false"
        ]
    );
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn without_a_reachable_leader_a_follower_answers_its_own_state_marked_stale() {
    // No leader known.
    let follower = Arc::new(Fake::follower(None));
    let app = replica_router(
        follower.clone(),
        Arc::new(Metrics::new()),
        Authenticator::disabled(),
        cluster(1, None),
    );
    let (status, headers, body) = get(app, "/v1/namespaces/orders/locks/order/17").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers["picket-stale"], "no-leader");
    assert_eq!(headers["picket-node"], "1");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["revision"], 50);
    assert_eq!(v["stale"], true);
    assert!(
        v["stale_reason"]
            .as_str()
            .unwrap()
            .starts_with("no leader is known"),
        "{body}"
    );
    assert_eq!(
        *follower.calls.lock().unwrap(),
        [
            "inspect orders order/17 stale=false",
            "inspect orders order/17 stale=true"
        ]
    );

    // A leader that does not answer on its HTTP address (a port nobody listens on).
    let closed = format!(
        "http://127.0.0.1:{}",
        picket_server::dev::free_port().unwrap()
    );
    let follower = Arc::new(Fake::follower(Some(2)));
    let app = replica_router(
        follower,
        Arc::new(Metrics::new()),
        Authenticator::disabled(),
        cluster(1, Some(closed.clone())),
    );
    let (status, headers, body) = get(app, "/v1/namespaces/orders/holds").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(headers["picket-stale"], "leader-unreachable");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["stale"], true);
    let reason = v["stale_reason"].as_str().unwrap();
    assert!(reason.contains(&closed), "{reason}");
}

#[tokio::test]
async fn the_runbooks_the_alerts_link_are_served() {
    let (app, _, _) = app();
    let (status, headers, body) = get(app.clone(), "/runbooks/stuck-lock.md?format=markdown").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/markdown"));
    assert!(body.contains("PicketHoldAboveClassMax"), "{body}");
    assert!(body.contains("`$namespace`"), "as written: {body}");
    // The alert's link: rendered, with the page's namespace and key filled in (escaped).
    let (status, headers, body) = get(
        app.clone(),
        "/runbooks/stuck-lock.md?namespace=orders&key=invoice%2F%3Cb%3E42",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(body.contains("<h1>"), "{body}");
    assert!(body.contains("<mark>orders</mark>"), "{body}");
    assert!(body.contains("<mark>invoice/&lt;b&gt;42</mark>"), "{body}");
    assert!(
        !body.contains("$namespace") && !body.contains("$key"),
        "{body}"
    );
    assert!(!body.contains("<b>42"), "values are escaped: {body}");
    let (status, _, body) = get(app.clone(), "/runbooks/cluster-down.md").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("PicketClusterDown"), "{body}");
    let (status, _, body) = get(app, "/runbooks/nothing.md").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("stuck-lock.md"), "{body}");
}

#[tokio::test]
async fn metrics_and_health_are_served() {
    let (app, _, metrics) = app();
    metrics.set_namespace_stats(&[NamespaceStats {
        namespace: "orders".to_owned(),
        holds: 1,
        waiters: 3,
        overdue_holds: vec![PagedHold {
            key: "order/17".to_owned(),
            held_for: Duration::from_secs(900),
            class: "payments".to_owned(),
            fenced: true,
            hold_max_expected: Duration::from_secs(600),
            queue_depth: 3,
            owner: "team-orders".to_owned(),
            runbook_url: String::new(),
        }],
        longest_hold: Some(PagedHold {
            key: "order/17".to_owned(),
            held_for: Duration::from_secs(900),
            class: "payments".to_owned(),
            fenced: true,
            hold_max_expected: Duration::from_secs(600),
            queue_depth: 3,
            owner: "team-orders".to_owned(),
            runbook_url: String::new(),
        }),
    }]);
    let (status, headers, body) = get(app.clone(), "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert!(
        body.contains("picket_longest_hold_seconds{namespace=\"orders\",key=\"order/17\","),
        "{body}"
    );
    for series in [
        "picket_overdue_hold_seconds{namespace=\"orders\",key=\"order/17\",class=\"payments\",fenced=\"true\",",
        "picket_overdue_hold_threshold_seconds{namespace=\"orders\",key=\"order/17\"} 600",
        "picket_overdue_hold_queue_depth{namespace=\"orders\",key=\"order/17\"} 3",
    ] {
        assert!(body.contains(series), "{series} in {body}");
    }
    let (status, _, body) = get(app, "/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ready"], true);
    assert_eq!(v["role"], "leader");
    // The storage condition (docs/http.md): how recovery ended, the lost flag, the directories.
    assert_eq!(v["storage"]["recovery"], "torn_tail_cut");
    assert_eq!(v["storage"]["torn_tail_bytes"], 17);
    assert_eq!(v["storage"]["durable_state_lost"], false);
    assert_eq!(v["storage"]["damaged_dir"], Value::Null);
    assert_eq!(v["storage"]["generation_dir"], "/data/replica-1");
    assert_eq!(v["members"][0]["client_endpoint"], "http://127.0.0.1:7401");
    assert_eq!(v["members"][0]["http_endpoint"], "http://127.0.0.1:7481");
    assert_eq!(v["members"][0]["voter"], true);
}

/// A session id that is not a number is the documented JSON error, not a framework message.
#[tokio::test]
async fn a_bad_session_id_in_the_told_path_is_a_json_error() {
    let app = picket_server::api::http::sessions_told::router(
        picket_server::api::told::ToldLog::default(),
        Authenticator::disabled(),
        1,
    );
    let (status, headers, body) = get(app.clone(), "/v1/sessions/abc/told").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"),
        "{headers:?}"
    );
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["rule"], "invalid_argument", "{body}");
    assert_eq!(v["error"]["field"], "path", "{body}");
    let (status, _, body) = get(app, "/v1/sessions/7/told").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
