//! HTTPS inspection on every replica (`[tls] http`): a follower forwards a read to the leader
//! over HTTPS, trusting the cluster's CA (`[tls] ca`), with the caller's bearer token; a caller
//! whose credential is a client certificate cannot be relayed, so a follower answers from its
//! own state and says why.
// Real processes, sockets and TLS: not under the simulator.
#![cfg(not(madsim))]

mod common;

use std::time::Duration;

use common::pki::Name;
use common::*;
use serde_json::Value;

const STEP: Duration = Duration::from_secs(15);
const PATH: &str = "/v1/namespaces/orders/locks/invoice/1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_forwards_https_inspection_to_the_leader_with_the_callers_token() {
    let cluster = OidcCluster::start_with(Options {
        oidc: true,
        tls: true,
        mtls: false,
        extra: String::new(),
        ..Options::default()
    });
    let leader = cluster.leader(STEP).await;
    let token = cluster.token("olga", &["picket-operator"]);
    let c = &cluster;
    let token = token.as_str();
    // Every replica, followers included, gives the leader's linearizable answer.
    let answers = eventually(
        STEP,
        "a linearizable answer from every replica",
        || async move {
            let mut answers = Vec::new();
            for http in &c.http {
                let Ok((200, body)) = c.get(&format!("{http}{PATH}"), Some(token), None).await
                else {
                    return None;
                };
                let json: Value = serde_json::from_str(&body).unwrap();
                if json["stale"] != false {
                    return None;
                }
                answers.push(json);
            }
            Some(answers)
        },
    )
    .await;
    assert_eq!(answers.len(), 3);
    for json in &answers {
        assert_eq!(json["key"], "invoice/1", "{json}");
        assert!(json["holder"].is_null(), "{json}");
    }
    // Without the token the leader refuses, and so does a follower (it relays the refusal or
    // refuses itself): forwarding adds no credential of its own.
    for http in &cluster.http {
        let (status, body) = cluster
            .get(&format!("{http}{PATH}"), None, None)
            .await
            .unwrap();
        assert_eq!(status, 401, "{http} (leader is {}): {body}", leader + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_answers_a_certificate_caller_from_its_own_state_and_says_why() {
    const ALICE: &str = "spiffe://picket.test/people/alice";
    let extra = format!(
        "[auth]\ncertificate_roles = []\n[auth.certificate_principal_roles]\n\
         {ALICE:?} = [\"picket-operator\"]\n"
    );
    let cluster = OidcCluster::start_with(Options::mtls(extra));
    let leader = cluster.leader(STEP).await;
    let alice = cluster
        .pki
        .as_ref()
        .unwrap()
        .client("alice", Name::Uri(ALICE));
    let (c, alice) = (&cluster, &alice);
    // The leader answers linearizably; a follower from its own state, naming the reason.
    let url = format!("{}{PATH}", cluster.http[leader]);
    let (status, body) = cluster.get(&url, None, Some(alice)).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["stale"], false, "{json}");
    let follower = (leader + 1) % 3;
    let url = format!("{}{PATH}", cluster.http[follower]);
    let json = eventually(STEP, "the follower knows the leader", || {
        let url = url.clone();
        async move {
            let (status, body) = c.get(&url, None, Some(alice)).await.ok()?;
            assert_eq!(status, 200, "{body}");
            let json: Value = serde_json::from_str(&body).unwrap();
            let reason = json["stale_reason"].as_str().unwrap_or_default().to_owned();
            reason.contains("client certificate").then_some(json)
        }
    })
    .await;
    assert_eq!(json["stale"], true, "{json}");
    assert_says(&json, "stale_reason", "ask the leader");
}
