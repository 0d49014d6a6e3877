//! The HTTP endpoint against a fake inspection source: JSON shapes, stale flag, errors, metrics.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use picket_core::locks::{
    ClassSpec, ForceReleaseId, ForceReleaseRequest, HoldInfo, Identity, KeyInfo, LockError,
    Revision, SessionId, Token, WaiterInfo,
};
use picket_core::time::Instant;
use picket_net::status::{lock_error_status, not_leader_status, LeaderHint};
use picket_server::http::{router, BoxFuture, Health, InspectSource};
use picket_server::metrics::{LongestHold, Metrics, NamespaceStats};
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
        }],
        floor: Some(Revision(41)),
        pending_force_releases: vec![ForceReleaseRequest {
            id: ForceReleaseId(55),
            namespace: "orders".to_owned(),
            key: "order/17".to_owned(),
            holder: SessionId(7),
            token: Token(41),
            requester: "alice".to_owned(),
            reason: "INC-123 holder stuck".to_owned(),
            revoke_session: true,
            fenced: true,
            safety: ClassSpec::safety_statement(true),
            requested_at: Instant::from_millis(800_000),
            expires_at: Instant::from_millis(1_400_000),
        }],
    }
}

/// Answers from fixed data and remembers the last call.
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<String>>,
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
        Box::pin(async move {
            match (namespace.as_str(), key.as_str()) {
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
        Box::pin(async move { Ok(vec![hold("order/17"), hold("order/18")]) })
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
                storage: picket_server::durable::StorageCondition {
                    recovery: "torn_tail_cut".to_owned(),
                    torn_tail_bytes: 17,
                    generation_dir: "/data/replica-1".to_owned(),
                    ..Default::default()
                },
            }
        })
    }
}

async fn get(app: axum::Router, uri: &str) -> (StatusCode, axum::http::HeaderMap, String) {
    let response = app
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
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
    let (status, _, body) = get(app, "/v1/namespaces/orders/holds?limit=10001").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("10000"), "{body}");
    assert_eq!(
        *fake.calls.lock().unwrap(),
        [
            "holds orders limit=1000 stale=false",
            "holds orders limit=5 stale=true"
        ]
    );
}

#[tokio::test]
async fn errors_are_json_with_rule_and_leader_hint() {
    let (app, _, _) = app();
    let (status, headers, body) = get(app.clone(), "/v1/namespaces/follower/locks/k").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["picket-leader"], "http://10.0.0.2:7401");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "unavailable");
    assert_eq!(v["error"]["rule"], "not_leader");
    assert_eq!(v["error"]["leader_endpoint"], "http://10.0.0.2:7401");
    assert_eq!(v["error"]["retryable"], true);

    let (status, _, body) = get(app, "/v1/namespaces/orders/locks/other").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["rule"], "unknown_session");
}

#[tokio::test]
async fn metrics_and_health_are_served() {
    let (app, _, metrics) = app();
    metrics.set_namespace_stats(&[NamespaceStats {
        namespace: "orders".to_owned(),
        holds: 1,
        waiters: 3,
        longest_hold: Some(LongestHold {
            key: "order/17".to_owned(),
            held_for: Duration::from_secs(900),
            class: "payments".to_owned(),
            fenced: true,
            hold_max_expected: Duration::from_secs(600),
            queue_depth: 3,
        }),
    }]);
    let (status, headers, body) = get(app.clone(), "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    assert!(
        body.contains("picket_longest_hold_seconds{namespace=\"orders\",key=\"order/17\"} 900.0")
    );
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
}
