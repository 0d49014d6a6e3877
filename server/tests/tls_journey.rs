//! The force-release journey over TLS with client certificates (mutual TLS) as the only
//! credentials: three real `picketd` processes with `[tls] require_client_cert = true` and no
//! OIDC; every step is the `picketctl` binary with `--ca`, `--cert` and `--key`.
//!
//! The certificates are made at test time (`tests/common/pki.rs`); their principals come from
//! a SAN URI, a SAN DNS name or the common name, and their roles from `[auth]`:
//! - the services' certificate (`spiffe://picket.test/svc/ledger`) may lock in `orders` only;
//! - alice (SAN URI) and bob (SAN DNS) are operators, carol (CN) is a class admin;
//! - `mallory` (CN) has a valid certificate and no role at all (`certificate_roles = []`).
//!
//! Also: plaintext to the TLS port and a missing client certificate are refused with a hint
//! naming the flag; a certificate without a lock role is refused naming `picket-client`; the
//! HTTPS inspection takes the certificate as the credential.
// Real processes, sockets and TLS: not under the simulator.
#![cfg(not(madsim))]

mod common;

use std::time::Duration;

use common::pki::{Name, Pem};
use common::*;
use serde_json::Value;

const NS: &str = "orders";
const KEY: &str = "invoice/7";
const STEP: Duration = Duration::from_secs(15);

const SVC: &str = "spiffe://picket.test/svc/ledger";
const ALICE: &str = "spiffe://picket.test/people/alice";
const BOB: &str = "bob.ops.picket.test";

struct People {
    svc: Pem,
    alice: Pem,
    bob: Pem,
    carol: Pem,
    mallory: Pem,
}

fn start() -> (OidcCluster, People) {
    let extra = format!(
        "[auth]\ncertificate_roles = []\n[auth.certificate_principal_roles]\n\
         {SVC:?} = [\"picket-client:orders\"]\n{ALICE:?} = [\"picket-operator\"]\n\
         {BOB:?} = [\"picket-operator:orders\"]\ncarol = [\"picket-admin\"]\n"
    );
    let cluster = OidcCluster::start_with(Options::mtls(extra));
    let pki = cluster.pki.as_ref().unwrap();
    let people = People {
        svc: pki.client("svc", Name::Uri(SVC)),
        alice: pki.client("alice", Name::Uri(ALICE)),
        bob: pki.client("bob", Name::Dns(BOB)),
        carol: pki.client("carol", Name::Cn("carol")),
        mallory: pki.client("mallory", Name::Cn("mallory")),
    };
    (cluster, people)
}

/// `picketctl --json inspect` as `who`, answering the JSON.
async fn inspect(cluster: &OidcCluster, who: &Pem) -> Value {
    cluster
        .picketctl_cert(Some(who), None, &["inspect", NS, KEY])
        .await
        .ok()
}

/// Starts `picketctl --json lock NS KEY -- CMD` as the service; its JSON lines arrive on the
/// receiver.
fn lock(
    cluster: &OidcCluster,
    svc: &Pem,
    command: &[&str],
) -> (
    tokio::process::Child,
    tokio::sync::mpsc::UnboundedReceiver<Value>,
) {
    let mut args = vec![
        "--timeout-ms",
        "2000",
        "lock",
        NS,
        KEY,
        "--ttl-ms",
        "3000",
        "--",
    ];
    args.extend_from_slice(command);
    cluster.picketctl_stream_cert(Some(svc), None, &args)
}

async fn next_line(lines: &mut tokio::sync::mpsc::UnboundedReceiver<Value>, what: &str) -> Value {
    tokio::time::timeout(STEP, lines.recv())
        .await
        .unwrap_or_else(|_| panic!("no line from picketctl: {what}"))
        .unwrap_or_else(|| panic!("picketctl ended: {what}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_holder_is_force_released_over_mutual_tls_by_two_people() {
    let (cluster, people) = start();
    cluster.leader(STEP).await;

    // Carol (CN) is the class admin; alice (an operator) may not put classes.
    let mut class = class_put_args(NS, "ledger");
    class.extend(["--fenced", "--ttl-ms-default", "3000"]);
    let (rule, error) = cluster
        .picketctl_cert(Some(&people.alice), None, &class)
        .await
        .refused(1);
    assert_eq!(rule, "missing_role", "{error}");
    let put = cluster
        .picketctl_cert(Some(&people.carol), None, &class)
        .await
        .ok();
    assert_eq!(put["class"]["fenced"], true, "{put}");

    // The stuck holder: a command that never ends, under the lock; then two waiters.
    let (mut holder, mut holder_lines) = lock(&cluster, &people.svc, &["sleep", "600"]);
    let acquired = next_line(&mut holder_lines, "the holder acquires").await;
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    let old_token = acquired["token"].as_u64().unwrap();
    let mut waiters = Vec::new();
    let (c, bob) = (&cluster, &people.bob);
    for depth in 1..=2u64 {
        waiters.push(lock(c, &people.svc, &["true"]));
        eventually(STEP, "the waiter queues", || async move {
            (inspect(c, bob).await["queue_depth"] == depth).then_some(())
        })
        .await;
    }

    // Alice looks: the holder's principal is its certificate's SAN URI.
    let info = inspect(&cluster, &people.alice).await;
    assert_eq!(info["holder"]["token"], old_token, "{info}");
    assert_eq!(info["holder"]["identity"]["principal"], SVC, "{info}");
    assert_eq!(info["class"]["fenced"], true, "{info}");
    // The HTTPS inspection takes the certificate as the credential; nothing is refused.
    let url = format!("{}/v1/namespaces/{NS}/locks/{KEY}", cluster.http[0]);
    let (status, body) = cluster.get(&url, None, None).await.unwrap();
    assert_eq!(status, 401, "no credential: {body}");
    let alice = &people.alice;
    let by_cert = eventually(STEP, "an HTTPS inspection by certificate", || async move {
        for http in &c.http {
            let url = format!("{http}/v1/namespaces/{NS}/locks/{KEY}");
            if let Ok((200, body)) = c.get(&url, None, Some(alice)).await {
                return Some(serde_json::from_str::<Value>(&body).unwrap());
            }
        }
        None
    })
    .await;
    assert_eq!(by_cert["holder"]["token"], old_token, "{by_cert}");

    // Alice requests; she cannot approve her own request; bob approves.
    let token_arg = old_token.to_string();
    let reason = "INC-9: ledger holder hung";
    let request = force_release_args(NS, KEY, &token_arg, reason, &["--revoke-session"]);
    let (rule, error) = cluster
        .picketctl_cert(Some(&people.mallory), None, &request)
        .await
        .refused(1);
    assert_eq!(rule, "missing_role", "{error}");
    let requested = cluster
        .picketctl_cert(Some(&people.alice), None, &request)
        .await
        .ok();
    assert_eq!(requested["fenced"], true, "{requested}");
    let id = requested["force_release_id"].as_u64().unwrap().to_string();
    let approve = ["force-release", "approve", id.as_str(), "--ack", "fenced"];
    let (rule, error) = cluster
        .picketctl_cert(Some(&people.alice), None, &approve)
        .await
        .refused(1);
    assert_eq!(rule, "approver_is_requester", "{error}");
    let (_watch, mut events) = cluster.picketctl_stream_cert(
        Some(&people.bob),
        None,
        &["watch", NS, KEY, "--from", &token_arg],
    );
    let approved = cluster
        .picketctl_cert(Some(&people.bob), None, &approve)
        .await
        .ok();
    assert_eq!(approved["released_token"], old_token, "{approved}");
    let floor = approved["floor"].as_u64().unwrap();

    // The holder's picketctl learns its session was revoked: it kills its command, exits 3.
    let lost = next_line(&mut holder_lines, "the holder's lock is lost").await;
    assert_eq!(lost["event"], "lost", "{lost}");
    let status = tokio::time::timeout(STEP, holder.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(3), "lock lost");

    // The queue drains: each waiter is granted (the first at the floor), runs, releases.
    let mut tokens = Vec::new();
    for (child, lines) in &mut waiters {
        let acquired = next_line(lines, "a waiter is granted").await;
        assert_eq!(acquired["event"], "acquired", "{acquired}");
        tokens.push(acquired["token"].as_u64().unwrap());
        let status = tokio::time::timeout(STEP, child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "the waiter's command ran and released");
    }
    assert_eq!(tokens[0], floor, "{tokens:?}");
    assert!(tokens[1] > tokens[0], "{tokens:?}");
    let drained = eventually(STEP, "the key is free", || async move {
        let info = inspect(c, alice).await;
        info["holder"].is_null().then_some(info)
    })
    .await;
    assert_eq!(drained["queue_depth"], 0, "{drained}");
    // bob's watch saw the force-release and both grants after it.
    let mut kinds = Vec::new();
    while kinds.iter().filter(|k| *k == "granted").count() < 2 {
        let event = next_line(&mut events, "watch events").await;
        kinds.push(event["kind"].as_str().unwrap_or_default().to_owned());
    }
    assert!(kinds.contains(&"force_released".to_owned()), "{kinds:?}");

    // The audit names the certificate principals.
    let audit = cluster
        .picketctl_cert(Some(&people.carol), None, &["audit", "--namespace", NS])
        .await
        .ok();
    let text = audit.to_string();
    assert!(text.contains(ALICE) && text.contains(BOB), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_transport_or_missing_certificate_or_role_is_refused_with_the_flag_to_use() {
    let (cluster, people) = start();
    cluster.leader(STEP).await;
    let quick = ["--retry-ms", "1500", "--timeout-ms", "1000"];

    // Plaintext to the TLS port: picketctl says to use https:// and --ca.
    let plain: Vec<String> = cluster
        .endpoints
        .iter()
        .map(|e| e.replace("https://", "http://"))
        .collect();
    let output = tokio::process::Command::new(picketctl_binary())
        .args(quick)
        .arg("--endpoints")
        .arg(plain.join(","))
        .arg("--cert")
        .arg(&people.alice.cert)
        .arg("--key")
        .arg(&people.alice.key)
        .args(["holds", NS])
        .env_remove("PICKET_CA")
        .env_remove("PICKET_ENDPOINTS")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Exit 6: no replica could be reached (docs/client.md, exit statuses).
    assert_eq!(output.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("hint:") && stderr.contains("https://") && stderr.contains("--ca"),
        "{stderr}"
    );

    // TLS without a client certificate: refused by the TLS layer; the hint names --cert.
    let mut args = quick.to_vec();
    args.extend(["holds", NS]);
    let (code, _, stderr) = cluster.picketctl_plain(None, None, &args).await;
    assert_eq!(code, 6, "{stderr}");
    assert!(
        stderr.contains("hint:") && stderr.contains("--cert") && stderr.contains("--key"),
        "{stderr}"
    );
    let refused = cluster.picketctl_cert(None, None, &args).await;
    assert_eq!(refused.code, 6, "{refused:?}");
    assert!(
        refused.json["hint"].as_str().unwrap().contains("--cert"),
        "{refused:?}"
    );

    // A valid certificate without a lock role: refused, naming the role to ask for.
    let (rule, error) = cluster
        .picketctl_cert(Some(&people.mallory), None, &["session"])
        .await
        .refused(1);
    assert_eq!(rule, "missing_role", "{error}");
    assert!(
        error.contains("picket-client") && error.contains("mallory"),
        "{error}"
    );
    // Its scope is the namespace: the services' certificate may lock in `orders` only.
    let (rule, error) = cluster
        .picketctl_cert(
            Some(&people.svc),
            None,
            &["lock", "billing", "k", "--no-wait", "--", "true"],
        )
        .await
        .refused(1);
    assert_eq!(rule, "missing_role", "{error}");
    assert!(error.contains("picket-client:billing"), "{error}");
    // Reads need a valid certificate only: mallory may look.
    let info = cluster
        .picketctl_cert(Some(&people.mallory), None, &["inspect", NS, KEY])
        .await
        .ok();
    assert!(info["holder"].is_null(), "{info}");
}
