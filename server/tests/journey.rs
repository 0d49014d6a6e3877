//! The on-call journey end to end (issue 7, DESIGN §1): an SRE paged by the longest-hold alert
//! on `orders` finds a holder that is alive and renewing but never releasing, and clears it
//! with a two-person force-release, without a double write.
//!
//! Against three real `picketd` processes (`tests/common`) with OIDC on: every admin mutation
//! carries a bearer token minted by a test issuer whose key set is the cluster's `jwks_file`.
//! - The services (the holder and the waiters) use the client library (`picket_client`)
//!   with their own tokens, so their sessions record a principal.
//! - Every operator step (class setup, inspect, force-release request/list/approve, watch,
//!   audit) runs the `picketctl` binary with `--auth-token ...` (mostly `--json`; `inspect` and
//!   one request also as text), as the SRE would; `inspect` is gRPC `Admin.Inspect`. No step
//!   goes through the gRPC Admin API directly. Approvals pass `--ack`: the interactive prompt
//!   needs a terminal, and its logic is unit-tested in `ctl/src/confirm.rs`.
//! - The protected resource is a `FencingGate` in this process: the holder's and the waiters'
//!   writes go through it with their tokens.
//! - `/metrics` and the HTTP inspection are read with plain `GET`s.
//! - The alert rule itself is checked by the promtool tests (deploy/prometheus); here the two
//!   series it compares are scraped and compared.
//!
//! No fixed long sleeps: every wait polls with a deadline.
// Real processes and sockets: not under the simulator.
#![cfg(not(madsim))]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use picket_client::{
    Client, ClientConfig, Credentials, LockGuard, LostReason, Session, SessionEnd,
};
use picket_client::{FencingError, FencingGate};
use picket_core::locks::Token;
use picket_proto::proto;
use serde_json::Value;

const NS: &str = "orders";
const RUNBOOK: &str = "https://runbooks.example.invalid/picket/stuck-lock";
/// Session TTL of every service here: keepalives every second.
const TTL: Duration = Duration::from_secs(3);
/// Generous bound on one step of the journey (elections, a keepalive round, a metrics refresh).
const STEP: Duration = Duration::from_secs(15);

/// A service process: the client library with its own identity and bearer token.
fn service(cluster: &OidcCluster, name: &str, host: &str) -> Client {
    let mut config = ClientConfig::new(cluster.endpoints.clone(), name);
    config.identity_host = host.to_owned();
    config.session_ttl = Some(TTL);
    config.wait_slice = Duration::from_secs(2);
    config.credentials = Credentials {
        bearer: Some(cluster.token(&format!("svc-{name}"), &["picket-client"])),
        ..Credentials::default()
    };
    Client::new(config).unwrap()
}

/// The fencing key of the protected resource.
fn resource_key(key: &str) -> String {
    format!("{NS}/{key}")
}

/// Puts the class of `orders` (max expected hold 2 s, the runbook link) as `carol`
/// (picket-admin); a put without a token is refused first.
async fn put_class(cluster: &OidcCluster, fenced: bool) {
    let mut args = class_put_args(NS, "ledger");
    args.extend(["--ttl-ms-default", "3000", "--ttl-ms-max", "10000"]);
    args.extend(["--hold-ms-max-expected", "2000", "--owner", "team-ledger"]);
    args.extend(["--runbook-url", RUNBOOK]);
    if fenced {
        args.push("--fenced");
    }
    let (rule, error) = cluster.picketctl(None, &args).await.refused(1);
    assert!(
        !rule.is_empty() && error.contains("Bearer"),
        "{rule}: {error}"
    );
    let operator = cluster.token("alice", &["picket-operator"]);
    let (rule, error) = cluster.picketctl(Some(&operator), &args).await.refused(1);
    assert_eq!(rule, "missing_role", "{error}");
    assert!(
        error.contains("picket-admin"),
        "names the role to ask for: {error}"
    );
    let carol = cluster.token("carol", &["picket-admin"]);
    let put = cluster.picketctl(Some(&carol), &args).await.ok();
    assert_eq!(put["class"]["fenced"], fenced, "{put}");
}

/// A waiter in its own task: queues for `key`; when granted, writes to the resource through
/// `gate` with its token, reports `(index, session, token)`, and releases (so the next waiter
/// is granted).
fn spawn_waiter(
    session: Session,
    key: &'static str,
    index: usize,
    gate: Arc<FencingGate>,
    granted: tokio::sync::mpsc::UnboundedSender<(usize, u64, Token)>,
) {
    tokio::spawn(async move {
        let guard = session.lock(NS, key).await.expect("the waiter is granted");
        gate.check(&resource_key(key), guard.token())
            .expect("the new holder's write is accepted");
        granted
            .send((index, session.id(), guard.token()))
            .expect("the test listens");
        guard.release().await.expect("the waiter releases");
        let _ = session.close().await;
    });
}

/// The key's inspection through the client library (linearizable).
async fn inspect(client: &Client, key: &str) -> proto::KeyInfo {
    inspect_key(client, NS, key).await
}

/// Queues `names` one after the other (each visible in the queue before the next starts, so
/// the FIFO order is the order of `names`); answers their sessions' ids.
async fn queue_waiters(
    cluster: &OidcCluster,
    observer: &Client,
    key: &'static str,
    names: &[&str],
    gate: &Arc<FencingGate>,
    granted: &tokio::sync::mpsc::UnboundedSender<(usize, u64, Token)>,
) -> Vec<u64> {
    let mut ids = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let session = service(cluster, name, "batch-1")
            .create_session()
            .await
            .unwrap();
        ids.push(session.id());
        spawn_waiter(session, key, i + 1, gate.clone(), granted.clone());
        let depth = u64::try_from(i + 1).unwrap();
        eventually(STEP, &format!("{name} queued"), || async move {
            (inspect(observer, key).await.queue_depth == depth).then_some(())
        })
        .await;
    }
    ids
}

/// The holder: alive and renewing, never releasing. Its first write through the gate is
/// accepted with its token.
async fn stuck_holder(
    cluster: &OidcCluster,
    key: &str,
    gate: &FencingGate,
) -> (Session, LockGuard) {
    let session = service(cluster, "ledger-writer", "web-1")
        .create_session()
        .await
        .unwrap();
    let guard = session.lock(NS, key).await.unwrap();
    gate.check(&resource_key(key), guard.token())
        .expect("the holder's first write is accepted");
    (session, guard)
}

/// The scrape of the replica whose `/metrics` shows the longest hold of `orders` on `key`
/// above its class's threshold, with both values.
async fn longest_hold_above_threshold(cluster: &OidcCluster, key: &str) -> (String, f64, f64) {
    let ns = &format!("namespace=\"{NS}\"");
    let key_label = &format!("key=\"{key}\"");
    eventually(
        STEP,
        "picket_longest_hold_seconds above the threshold",
        || async move {
            for http in &cluster.http {
                let Ok((200, text)) = get(&format!("{http}/metrics")).await else {
                    continue;
                };
                let held = sample(&text, "picket_longest_hold_seconds", &[ns, key_label]);
                let threshold = sample(&text, "picket_longest_hold_threshold_seconds", &[ns]);
                if let (Some(held), Some(threshold)) = (held, threshold) {
                    if held > threshold {
                        return Some((text, held, threshold));
                    }
                }
            }
            None
        },
    )
    .await
}

/// The HTTP inspection of `key` at the replica that answers it linearizably (the leader), as
/// the holder of `token` (with OIDC on, inspection needs a valid bearer token).
async fn http_inspect(cluster: &OidcCluster, key: &str, token: &str) -> Value {
    eventually(STEP, "a linearizable HTTP inspection", || async move {
        for http in &cluster.http {
            let url = format!("{http}/v1/namespaces/{NS}/locks/{key}");
            if let Ok((200, body)) = get_as(&url, Some(token)).await {
                return Some(serde_json::from_str::<Value>(&body).unwrap());
            }
        }
        None
    })
    .await
}

/// The holder's fields as both inspections show them (`holder` of picketctl's and the HTTP
/// JSON, which share the field names).
fn assert_holder(json: &Value, session: &Session, token: Token) {
    let holder = &json["holder"];
    assert_eq!(holder["identity"]["name"], "ledger-writer", "{json}");
    assert_eq!(holder["identity"]["host"], "web-1", "{json}");
    assert_eq!(holder["identity"]["pid"], std::process::id(), "{json}");
    assert_eq!(
        holder["identity"]["principal"], "svc-ledger-writer",
        "{json}"
    );
    assert_eq!(holder["session_id"], session.id(), "{json}");
    assert_eq!(holder["token"], token.0, "{json}");
    assert!(holder["held_for_ms"].as_u64().unwrap() >= 2_000, "{json}");
    assert!(holder["session_remaining_ms"].as_u64().is_some(), "{json}");
}

/// The audit records of `key` (picketctl audit), after checking both force-release steps are
/// there with their actors, the reason and the fenced flag.
async fn assert_audit(cluster: &OidcCluster, token: &str, key: &str, fenced: bool, reason: &str) {
    let audit = cluster
        .picketctl(Some(token), &["audit", "--namespace", NS, "--key", key])
        .await
        .ok();
    let records = audit["records"].as_array().unwrap();
    let find = |action: &str| {
        records
            .iter()
            .find(|r| r["action"] == action)
            .unwrap_or_else(|| panic!("no `{action}` record in {audit}"))
    };
    let requested = find("force-release requested");
    assert_eq!(requested["actor"], "alice", "{audit}");
    assert_eq!(requested["reason"], reason, "{audit}");
    assert_eq!(requested["fenced"], fenced, "{audit}");
    let approved = find("force-release approved");
    assert_eq!(approved["actor"], "bob", "{audit}");
    assert_eq!(approved["reason"], reason, "{audit}");
    let revoked = find("session revoked");
    assert_eq!(revoked["actor"], "bob", "{audit}");
    assert_eq!(revoked["revision"], approved["revision"], "{audit}");
    assert_eq!(approved["fenced"], fenced, "{audit}");
    assert_eq!(approved["token"], requested["token"], "{audit}");
    assert_eq!(
        approved["force_release_id"], requested["force_release_id"],
        "{audit}"
    );
    assert!(
        approved["revision"].as_u64() > requested["revision"].as_u64(),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_fenced_holder_is_force_released_by_two_people_and_the_queue_drains() {
    const KEY: &str = "invoice/42";
    let cluster = OidcCluster::start();
    cluster.leader(STEP).await;
    put_class(&cluster, true).await;
    let alice = cluster.token("alice", &["picket-operator"]);
    // Bob's role is scoped to the namespace: it counts because the request is on `orders`.
    let bob = cluster.token("bob", &["picket-operator:orders"]);
    let viewer = cluster.token("victor", &["picket-operator:billing"]);

    // A holder alive and renewing that never releases; three waiters queue behind it.
    let gate = Arc::new(FencingGate::new(16));
    let (holder_session, guard) = stuck_holder(&cluster, KEY, &gate).await;
    let old_token = guard.token();
    let observer = service(&cluster, "observer", "ops-1");
    let (granted_tx, mut granted_rx) = tokio::sync::mpsc::unbounded_channel();
    let waiters = queue_waiters(
        &cluster,
        &observer,
        KEY,
        &["waiter-1", "waiter-2", "waiter-3"],
        &gate,
        &granted_tx,
    )
    .await;

    // Another, younger hold in the namespace: `holds` lists the stuck one first (oldest first).
    let other = observer.create_session().await.unwrap();
    let other_guard = other.lock(NS, "invoice/43").await.unwrap();
    let holds = cluster.picketctl(Some(&alice), &["holds", NS]).await.ok();
    let keys: Vec<&str> = each(&holds["holds"], |h| h["key"].as_str().unwrap());
    assert_eq!(keys, [KEY, "invoice/43"], "{holds}");
    other_guard.release().await.unwrap();

    // The page: the longest hold of `orders` is on the key, above the class's 2 s.
    let (text, held, threshold) = longest_hold_above_threshold(&cluster, KEY).await;
    assert_eq!(threshold, 2.0, "{text}");
    assert!(held > threshold, "{held} {threshold}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("picket_longest_hold_threshold_seconds{")
                && l.contains("namespace=\"orders\"")
                && l.contains("class=\"ledger\"")
                && l.contains("fenced=\"true\"")),
        "{text}"
    );
    let depth = sample(
        &text,
        "picket_longest_hold_queue_depth",
        &["namespace=\"orders\"", &format!("key=\"{KEY}\"")],
    );
    assert_eq!(depth, Some(3.0), "{text}");

    // Alive and renewing: the remaining TTL goes back up between two looks.
    let first = inspect(&observer, KEY).await;
    let first_remaining = first.holder.as_ref().unwrap().session_remaining_ms.unwrap();
    let observer_ref = &observer;
    eventually(
        STEP,
        "the holder's remaining TTL rising (keepalives)",
        || async move {
            let now = inspect(observer_ref, KEY).await;
            (now.holder?.session_remaining_ms? > first_remaining).then_some(())
        },
    )
    .await;

    // Look: picketctl inspect (gRPC Admin.Inspect) and the HTTP inspection agree.
    let shown = cluster
        .picketctl(Some(&alice), &["inspect", NS, KEY])
        .await
        .ok();
    // Without a token the HTTP inspection is refused, as the gRPC admin reads are.
    let url = format!("{}/v1/namespaces/{NS}/locks/{KEY}", cluster.http[0]);
    let (status, body) = get(&url).await.unwrap();
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("missing_token"), "{body}");
    let http = http_inspect(&cluster, KEY, &viewer).await;
    for json in [&shown, &http] {
        assert_holder(json, &holder_session, old_token);
        assert_eq!(json["queue_depth"], 3, "{json}");
        let names: Vec<&str> = each(&json["waiters"], |w| {
            w["identity"]["name"].as_str().unwrap()
        });
        assert_eq!(names, ["waiter-1", "waiter-2", "waiter-3"], "{json}");
        let sessions: Vec<u64> = each(&json["waiters"], |w| w["session_id"].as_u64().unwrap());
        assert_eq!(sessions, waiters, "{json}");
        assert_eq!(json["class"]["fenced"], true, "{json}");
        assert_eq!(json["class"]["runbook_url"], RUNBOOK, "{json}");
        assert_eq!(
            json["floor"], old_token.0,
            "a fresh grant's floor is its token: {json}"
        );
    }
    assert_eq!(http["stale"], false, "{http}");
    // The same for a person reading it at night.
    let text = cluster
        .picketctl_text(Some(&alice), &["inspect", NS, KEY])
        .await;
    for part in [
        "ledger-writer@web-1",
        "(svc-ledger-writer)",
        &format!("token:    {}", old_token.0),
        "queue:    3 waiting",
        "1. session",
        "FENCED",
        &format!("runbook:  {RUNBOOK}"),
        &format!("floor:    {}", old_token.0),
    ] {
        assert!(text.contains(part), "inspect lacks {part:?}:\n{text}");
    }

    // Request (alice). Without a token, or with a role for another namespace: refused.
    let reason = "INC-7: ledger-writer on web-1 renews but never releases, 3 waiters";
    let token_arg = old_token.0.to_string();
    let request = force_release_args(NS, KEY, &token_arg, reason, &["--revoke-session"]);
    let (rule, error) = cluster.picketctl(None, &request).await.refused(1);
    assert!(!rule.is_empty(), "{error}");
    let (rule, error) = cluster.picketctl(Some(&viewer), &request).await.refused(1);
    assert_eq!(rule, "missing_role", "{error}");
    assert!(error.contains("picket-operator"), "{error}");
    let requested = cluster.picketctl(Some(&alice), &request).await.ok();
    assert_eq!(requested["fenced"], true, "{requested}");
    assert_says(&requested, "safety", "refuse the old holder's writes");
    assert_eq!(
        requested["key"]["holder"]["token"], old_token.0,
        "{requested}"
    );
    let id = requested["force_release_id"].as_u64().unwrap().to_string();
    let approve = |ack: &'static str| ["force-release", "approve", id.as_str(), "--ack", ack];
    // The pending request shows in the inspection, for the second person to look at.
    let pending = &http_inspect(&cluster, KEY, &viewer).await["pending_force_releases"][0];
    assert_eq!(pending["id"].to_string(), id, "{pending}");
    assert_eq!(pending["requester"], "alice", "{pending}");
    assert_eq!(pending["reason"], reason, "{pending}");
    assert_eq!(pending["fenced"], true, "{pending}");
    assert_eq!(pending["token"], old_token.0, "{pending}");
    // The SRE watches the key from here on (from the old grant).
    let from = old_token.0.to_string();
    let (_watch, mut events) =
        cluster.picketctl_stream(Some(&alice), &["watch", NS, KEY, "--from", &from]);

    // Two-person rule: alice cannot approve her own request, whatever she acknowledges.
    let (rule, error) = cluster
        .picketctl(Some(&alice), &approve("fenced"))
        .await
        .refused(1);
    assert_eq!(rule, "approver_is_requester", "{error}");
    assert!(error.contains("a second person must"), "{error}");
    // No token, or no role in `orders`: refused by the server.
    let (rule, error) = cluster.picketctl(None, &approve("fenced")).await.refused(1);
    assert!(
        !rule.is_empty() && error.contains("Bearer"),
        "{rule}: {error}"
    );
    let (rule, error) = cluster
        .picketctl(Some(&viewer), &approve("fenced"))
        .await
        .refused(1);
    assert_eq!(rule, "missing_role", "{error}");
    assert!(error.contains("picket-operator"), "{error}");
    // Bob must acknowledge the class kind: the wrong one, or none without a terminal, is
    // refused by picketctl before anything is sent.
    let (rule, error) = cluster
        .picketctl(Some(&bob), &approve("advisory"))
        .await
        .refused(2);
    assert_eq!(rule, "refused_by_picketctl");
    assert!(
        error.contains("does not match") && error.contains("FENCED"),
        "{error}"
    );
    let (_, error) = cluster
        .picketctl(Some(&bob), &["force-release", "approve", &id])
        .await
        .refused(2);
    // The refusal states the kind and why it matters, and hands over no flag to paste.
    assert!(error.contains("class is FENCED"), "{error}");
    assert!(!error.contains("--ack fenced"), "{error}");
    assert!(guard.is_held(), "nothing was released by the refusals");

    // Bob approves with the fenced acknowledgement.
    let approved = cluster.picketctl(Some(&bob), &approve("fenced")).await.ok();
    assert_eq!(approved["released_token"], old_token.0, "{approved}");
    assert_eq!(
        approved["session_revoked"],
        holder_session.id(),
        "{approved}"
    );
    assert_eq!(approved["next"]["session_id"], waiters[0], "{approved}");
    // The approver was shown the key as it was: the stuck holder and the queue.
    assert_eq!(
        approved["key_before"]["holder"]["token"], old_token.0,
        "{approved}"
    );
    assert_eq!(approved["key_before"]["queue_depth"], 3, "{approved}");
    let floor = approved["floor"].as_u64().unwrap();
    assert!(floor > old_token.0, "{approved}");

    // The old holder's client learns it (by the push, else at its next keepalive) and fires the
    // lost-lock signal.
    let lost = tokio::time::timeout(STEP, guard.lost())
        .await
        .expect("the lost-lock signal fires");
    assert!(revoked(&lost), "{lost:?}");
    assert!(!guard.is_held());

    // The queue drains in FIFO order; the first waiter is granted in the release's own
    // revision (token = floor), the next ones above it, rising.
    let mut grants = Vec::new();
    for _ in 0..3 {
        let grant = tokio::time::timeout(STEP, granted_rx.recv())
            .await
            .expect("the queue drains")
            .unwrap();
        grants.push(grant);
    }
    let order: Vec<usize> = grants.iter().map(|g| g.0).collect();
    assert_eq!(order, [1, 2, 3], "{grants:?}");
    let sessions: Vec<u64> = grants.iter().map(|g| g.1).collect();
    assert_eq!(sessions, waiters);
    assert_eq!(
        grants[0].2 .0, floor,
        "granted in the force-release's revision"
    );
    assert_eq!(approved["next"]["token"], floor, "{approved}");
    for pair in grants.windows(2) {
        assert!(pair[1].2 > pair[0].2, "tokens rise: {grants:?}");
    }
    assert!(grants.iter().all(|g| g.2 > old_token));

    // The old holder, paused until now, tries to write with its token: the resource refuses.
    let refused = gate.check(&resource_key(KEY), old_token).unwrap_err();
    assert!(
        matches!(refused, FencingError::Stale { token, highest, .. }
            if token == old_token && highest == grants[2].2),
        "{refused}"
    );

    // `picketctl watch` showed the force-release, then the waiters granted in order.
    let mut seen = Vec::new();
    while seen
        .iter()
        .filter(|e: &&Value| e["kind"] == "granted")
        .count()
        < 4
    {
        let event = tokio::time::timeout(STEP, events.recv())
            .await
            .unwrap_or_else(|_| panic!("watch events so far: {seen:?}"))
            .expect("picketctl watch runs");
        assert_eq!(event["key"], KEY, "{event}");
        seen.push(event);
    }
    let kinds: Vec<(&str, u64)> = seen
        .iter()
        .filter(|e| e["kind"] == "granted" || e["kind"] == "force_released")
        .map(|e| (e["kind"].as_str().unwrap(), e["revision"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("granted", old_token.0),
            ("force_released", floor),
            ("granted", grants[0].2 .0),
            ("granted", grants[1].2 .0),
            ("granted", grants[2].2 .0),
        ],
        "{seen:?}"
    );
    let granted_sessions: Vec<u64> = seen
        .iter()
        .filter(|e| e["kind"] == "granted")
        .skip(1)
        .map(|e| e["detail"]["session_id"].as_u64().unwrap())
        .collect();
    assert_eq!(granted_sessions, waiters, "{seen:?}");

    assert_audit(&cluster, &alice, KEY, true, reason).await;
    let after = inspect(&observer, KEY).await;
    assert!(
        after.holder.is_none() && after.queue_depth == 0,
        "{after:?}"
    );
    assert!(after.pending_force_releases.is_empty(), "{after:?}");

    // The alert resolves: no replica reports a hold of the key any more (the namespace series
    // are recomputed once a second).
    let key_label = &format!("key=\"{KEY}\"");
    let replicas = &cluster.http;
    eventually(
        STEP,
        "the longest hold of the key gone from /metrics",
        || async move {
            for http in replicas {
                let (200, text) = get(&format!("{http}/metrics")).await.ok()? else {
                    return None;
                };
                if sample(&text, "picket_longest_hold_seconds", &[key_label]).is_some() {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advisory_release_warns_of_two_writers_and_needs_the_advisory_acknowledgement() {
    const KEY: &str = "batch/7";
    let cluster = OidcCluster::start();
    cluster.leader(STEP).await;
    put_class(&cluster, false).await;
    let alice = cluster.token("alice", &["picket-operator"]);
    // An incident commander approves in place of a second on-call.
    let bob = cluster.token("bob", &["picket-incident-commander"]);

    let gate = Arc::new(FencingGate::new(16));
    let (holder_session, guard) = stuck_holder(&cluster, KEY, &gate).await;
    let old_token = guard.token();
    let observer = service(&cluster, "observer", "ops-1");
    let (granted_tx, mut granted_rx) = tokio::sync::mpsc::unbounded_channel();
    let waiters = queue_waiters(&cluster, &observer, KEY, &["waiter-1"], &gate, &granted_tx).await;

    let shown = cluster
        .picketctl(Some(&alice), &["inspect", NS, KEY])
        .await
        .ok();
    assert_eq!(shown["class"]["fenced"], false, "{shown}");
    assert_eq!(shown["holder"]["token"], old_token.0, "{shown}");

    let reason = "INC-8: batch runner hung; owner confirms the process is stopped";
    let token_arg = old_token.0.to_string();
    // An advisory request without the checklist is refused by picketctl: nothing is sent.
    let unanswered = force_release_args(NS, KEY, &token_arg, reason, &[]);
    let (rule, error) = cluster
        .picketctl(Some(&alice), &unanswered)
        .await
        .refused(2);
    assert_eq!(rule, "refused_by_picketctl", "{error}");
    assert!(
        error.contains("ADVISORY") && error.contains("--holder-stopped"),
        "{error}"
    );
    // A request naming a token the key does not hold is refused (the key changed hands, or a
    // typo): nothing is recorded.
    let wrong = (old_token.0 + 1_000).to_string();
    let (rule, error) = cluster
        .picketctl(
            Some(&alice),
            &force_release_args(NS, KEY, &wrong, reason, &CHECKLIST_ANSWERED),
        )
        .await
        .refused(1);
    assert_eq!(rule, "token_mismatch", "{error}");
    // Requested as a person reads it: the warning is in plain words, before anything else.
    let mut request = force_release_args(NS, KEY, &token_arg, reason, &["--revoke-session"]);
    request.extend(CHECKLIST_ANSWERED);
    let shown = cluster.picketctl_text(Some(&alice), &request).await;
    for part in [
        "ADVISORY (not fenced)",
        "releasing may let two writers in",
        "type the class kind",
        "ledger-writer@web-1",
    ] {
        assert!(shown.contains(part), "request lacks {part:?}:\n{shown}");
    }
    let listed = cluster
        .picketctl(Some(&bob), &["force-release", "list"])
        .await
        .ok();
    let requested = listed["requests"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["key"] == KEY))
        .unwrap_or_else(|| panic!("the request is listed: {listed}"))
        .clone();
    assert_eq!(requested["fenced"], false, "{requested}");
    let safety = requested["safety"].as_str().unwrap();
    assert!(safety.contains("two writers"), "{safety}");
    let id = requested["id"].as_u64().unwrap().to_string();
    let approve = |ack: &'static str| ["force-release", "approve", id.as_str(), "--ack", ack];

    let (rule, _) = cluster
        .picketctl(Some(&alice), &approve("advisory"))
        .await
        .refused(1);
    assert_eq!(rule, "approver_is_requester");
    // Acknowledging "fenced" on an advisory class is refused: nothing is sent.
    let (rule, error) = cluster
        .picketctl(Some(&bob), &approve("fenced"))
        .await
        .refused(2);
    assert_eq!(rule, "refused_by_picketctl");
    assert!(
        error.contains("two writers")
            && error.contains("class is ADVISORY")
            && !error.contains("--ack advisory"),
        "{error}"
    );
    assert!(guard.is_held());

    let approved = cluster
        .picketctl(Some(&bob), &approve("advisory"))
        .await
        .ok();
    assert_eq!(approved["fenced"], false, "{approved}");
    assert!(
        approved["safety"].as_str().unwrap().contains("two writers"),
        "the warning is shown with the approval: {approved}"
    );
    assert_eq!(approved["released_token"], old_token.0, "{approved}");
    assert_eq!(
        approved["session_revoked"],
        holder_session.id(),
        "{approved}"
    );

    let lost = tokio::time::timeout(STEP, guard.lost())
        .await
        .expect("the lost-lock signal fires");
    assert!(revoked(&lost), "{lost:?}");
    let (index, session, token) = tokio::time::timeout(STEP, granted_rx.recv())
        .await
        .expect("the waiter is granted")
        .unwrap();
    assert_eq!((index, session), (1, waiters[0]));
    assert_eq!(approved["next"]["token"], token.0, "{approved}");
    assert!(token > old_token);

    // The warning is recorded: the audit trail says the class was advisory.
    assert_audit(&cluster, &alice, KEY, false, reason).await;
}

/// A process's state letter from `/proc/PID/stat` (`None`: gone).
fn process_state(pid: u64) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let end = stat.rfind(')')?;
    stat[end + 1..].split_whitespace().next().map(str::to_owned)
}

/// Gone, or a zombie nobody has reaped yet: either way it runs no more.
fn process_gone(pid: u64) -> bool {
    process_state(pid).is_none_or(|state| state == "Z")
}

/// Starts `picketctl lock NS KEY --ttl-ms 3000 --name NAME -- sh -c 'sleep 601 & ...; wait'` as
/// the service `svc-NAME`; answers the process, its JSON lines, the command's pid (as printed in
/// the `acquired` event) and the pid of the `sleep` the command left in its group.
async fn picketctl_lock_holder(
    cluster: &OidcCluster,
    key: &str,
    name: &str,
) -> (
    tokio::process::Child,
    tokio::sync::mpsc::UnboundedReceiver<Value>,
    u64,
    u64,
) {
    let svc = cluster.token(&format!("svc-{name}"), &["picket-client"]);
    let sleep_file = cluster.dir.path().join(format!("{name}.sleep"));
    let script = format!("sleep 601 & echo $! > {}; wait", sleep_file.display());
    let (child, mut lines) = cluster.picketctl_stream(
        Some(&svc),
        &[
            "lock", NS, key, "--ttl-ms", "3000", "--name", name, "--", "sh", "-c", &script,
        ],
    );
    let acquired = tokio::time::timeout(STEP, lines.recv())
        .await
        .expect("picketctl lock takes the free key")
        .expect("picketctl lock runs");
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    let pid = acquired["pid"].as_u64().expect("the command's pid");
    let sleep_pid = eventually(STEP, "the command started its sleep", || {
        let sleep_file = sleep_file.clone();
        async move {
            std::fs::read_to_string(sleep_file)
                .ok()?
                .trim()
                .parse()
                .ok()
        }
    })
    .await;
    (child, lines, pid, sleep_pid)
}

/// Issue 16, findings 2, 3 and 6 on the runbook's path (docs/runbooks/stuck-lock.md, steps 1
/// and 4-6), with a `picketctl lock` holder: the watch starts now and says who; a force-release
/// without revocation says what the holder will and will not learn and still stops the
/// holder's command (its whole group); a second request is refused naming the first; a class
/// changed from fenced to advisory refuses the approval naming both kinds, the list marks the
/// request, and a new request shows the new kind; the audit text shows time, kind at release,
/// both people with roles, floor, next holder and revocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_picketctl_lock_holder_released_without_revocation_stops_and_the_tools_say_what_is_current(
) {
    const KEY: &str = "batch/9";
    let cluster = OidcCluster::start();
    cluster.leader(STEP).await;
    put_class(&cluster, true).await;
    let alice = cluster.token("alice", &["picket-operator"]);
    let bob = cluster.token("bob", &["picket-operator"]);
    let carol = cluster.token("carol", &["picket-admin"]);
    let dave = cluster.token("dave", &["picket-incident-commander"]);

    // Step 1 (look, watch): the watch starts at the current revision (no history replayed).
    let (_watch, mut events) = cluster.picketctl_stream(Some(&alice), &["watch", NS, KEY]);
    let (mut holder, mut holder_lines, pid, sleep_pid) =
        picketctl_lock_holder(&cluster, KEY, "nightly-batch").await;
    let observer = service(&cluster, "observer", "ops-1");
    let (granted_tx, mut granted_rx) = tokio::sync::mpsc::unbounded_channel();
    let gate = Arc::new(FencingGate::new(16));
    let waiters = queue_waiters(&cluster, &observer, KEY, &["waiter-1"], &gate, &granted_tx).await;
    let granted = tokio::time::timeout(STEP, events.recv())
        .await
        .expect("the watch shows the grant")
        .unwrap();
    assert_eq!(granted["kind"], "granted", "{granted}");
    assert_eq!(granted["identity"]["name"], "nightly-batch", "{granted}");
    assert_eq!(granted["identity"]["pid"], pid, "{granted}");
    assert!(
        granted["time"].as_str().unwrap().ends_with('Z'),
        "{granted}"
    );
    // inspect names the command (its pid, its --name): the process the runbook says to kill.
    let shown = cluster
        .picketctl_text(Some(&alice), &["inspect", NS, KEY])
        .await;
    assert!(
        shown.contains("nightly-batch@") && shown.contains(&format!("pid {pid}")),
        "{shown}"
    );
    let token = inspect(&observer, KEY).await.holder.unwrap().token;

    // Step 4: a request without --revoke-session says what the holder will and will not learn.
    let token_arg = token.to_string();
    let reason = "INC-9: nightly batch hung";
    let request = force_release_args(NS, KEY, &token_arg, reason, &[]);
    let text = cluster.picketctl_text(Some(&alice), &request).await;
    for part in ["WITHOUT --revoke-session", "learns NOTHING", "FENCED"] {
        assert!(text.contains(part), "request lacks {part:?}:\n{text}");
    }
    let listed = cluster
        .picketctl(Some(&bob), &["force-release", "list"])
        .await
        .ok();
    let first = listed["requests"][0]["id"].as_u64().unwrap();
    assert_eq!(
        listed["requests"][0]["requester_roles"], "picket-operator",
        "{listed}"
    );
    // A second request for the same hold is refused, naming the pending one.
    let (rule, error) = cluster.picketctl(Some(&dave), &request).await.refused(1);
    assert_eq!(rule, "force_release_pending", "{error}");
    assert!(
        error.contains(&format!("request fr{first} pending"))
            && error.contains(&format!("approve {first}")),
        "{error}"
    );

    // The class owner makes the class advisory while the request waits.
    let mut advisory = class_put_args(NS, "ledger");
    advisory.extend(["--ttl-ms-default", "3000", "--ttl-ms-max", "10000"]);
    advisory.extend(["--hold-ms-max-expected", "2000", "--runbook-url", RUNBOOK]);
    cluster.picketctl(Some(&carol), &advisory).await.ok();
    // Step 5: the approval is refused, naming both kinds, whatever it acknowledges.
    let first_arg = first.to_string();
    for ack in ["fenced", "advisory"] {
        let (rule, error) = cluster
            .picketctl(
                Some(&bob),
                &["force-release", "approve", &first_arg, "--ack", ack],
            )
            .await
            .refused(2);
        assert_eq!(rule, "refused_by_picketctl", "{error}");
        assert!(
            error.contains("was requested when its class was fenced; the class is advisory now"),
            "{error}"
        );
    }
    let listed = cluster
        .picketctl(Some(&bob), &["force-release", "list"])
        .await
        .ok();
    assert_eq!(listed["requests"][0]["fenced_now"], false, "{listed}");
    let text = cluster
        .picketctl_text(Some(&bob), &["force-release", "list"])
        .await;
    assert!(text.contains("STALE: the class is advisory now"), "{text}");
    // A new request (the stale one does not block it) shows the new kind; the class is advisory
    // now, so it answers the checklist.
    let mut advisory_request = request.clone();
    advisory_request.extend(CHECKLIST_ANSWERED);
    let requested = cluster
        .picketctl(Some(&alice), &advisory_request)
        .await
        .ok();
    assert_eq!(requested["fenced"], false, "{requested}");
    let second = requested["force_release_id"].as_u64().unwrap().to_string();
    let approved = cluster.approve(&dave, &second, "advisory").await;
    assert_eq!(approved["fenced"], false, "{approved}");
    assert!(approved["session_revoked"].is_null(), "{approved}");
    assert_says(&approved, "holder_learns", "learns NOTHING");
    let floor = approved["floor"].as_u64().unwrap();

    // The holder learns at its next keepalive: picketctl stops the command's whole group,
    // says so, and exits 3 (lock lost).
    let lost = tokio::time::timeout(STEP, holder_lines.recv())
        .await
        .expect("picketctl reports the loss")
        .unwrap();
    assert_eq!(lost["event"], "lost", "{lost}");
    assert!(
        lost["reason"].as_str().unwrap().contains("force-released"),
        "{lost}"
    );
    let status = tokio::time::timeout(STEP, holder.wait())
        .await
        .expect("picketctl exits")
        .unwrap();
    assert_eq!(status.code(), Some(3), "lock lost");
    eventually(STEP, "the command's sleep stopped with it", || async move {
        process_gone(sleep_pid).then_some(())
    })
    .await;
    assert!(process_gone(pid));
    let (index, session, next) = tokio::time::timeout(STEP, granted_rx.recv())
        .await
        .expect("the waiter is granted")
        .unwrap();
    assert_eq!((index, session, next.0), (1, waiters[0], floor));

    // Step 6: the audit text says what happened, in full.
    let audit = cluster
        .picketctl_text(Some(&alice), &["audit", "--namespace", NS, "--key", KEY])
        .await;
    let line = audit
        .lines()
        .find(|l| l.contains("force-release approved"))
        .unwrap_or_else(|| panic!("no approval in:\n{audit}"));
    for part in [
        "Z force-release approved",
        "by dave (picket-incident-commander)",
        "requested by alice (picket-operator)",
        "advisory",
        &format!("floor {floor}"),
        &format!("next holder session {} token {floor}", waiters[0]),
        "revoke session: no",
    ] {
        assert!(line.contains(part), "audit lacks {part:?}:\n{line}");
    }
}

/// Issue 16, finding 4 and runbook step 2 ("kill the holder"): `kill PID` of the pid `inspect`
/// shows ends the command; picketctl stops the rest of its group, releases the lock at once
/// (the waiter does not wait for a TTL) and exits with the command's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_pid_inspect_shows_stops_the_group_and_hands_the_lock_on() {
    const KEY: &str = "batch/10";
    let cluster = OidcCluster::start();
    cluster.leader(STEP).await;
    put_class(&cluster, true).await;
    let alice = cluster.token("alice", &["picket-operator"]);
    let (mut holder, _lines, pid, sleep_pid) =
        picketctl_lock_holder(&cluster, KEY, "stuck-batch").await;
    let shown = cluster
        .picketctl(Some(&alice), &["inspect", NS, KEY])
        .await
        .ok();
    assert_eq!(shown["holder"]["identity"]["pid"], pid, "{shown}");
    let observer = service(&cluster, "observer", "ops-1");
    let (granted_tx, mut granted_rx) = tokio::sync::mpsc::unbounded_channel();
    let gate = Arc::new(FencingGate::new(16));
    let waiters = queue_waiters(&cluster, &observer, KEY, &["waiter-1"], &gate, &granted_tx).await;
    let killed = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(STEP, holder.wait())
        .await
        .expect("picketctl exits once its command is gone")
        .unwrap();
    assert_eq!(status.code(), Some(143), "the command's status (SIGTERM)");
    eventually(STEP, "the sleep left in the group stopped", || async move {
        process_gone(sleep_pid).then_some(())
    })
    .await;
    let (_, session, _) = tokio::time::timeout(STEP, granted_rx.recv())
        .await
        .expect("the lock is handed on")
        .unwrap();
    assert_eq!(session, waiters[0]);
}

/// The session was revoked: said by the push (with its cause) or by a keepalive answer.
fn revoked(reason: &LostReason) -> bool {
    matches!(
        reason,
        LostReason::Revoked
            | LostReason::Ended {
                cause: SessionEnd::Revoked { .. },
                ..
            }
    )
}
