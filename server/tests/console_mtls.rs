//! The web console on a cluster whose client ports require client certificates (`[tls]
//! require_client_cert = true`): three real `picketd` with OIDC sign-in at a real OpenID
//! Provider (`tests/oidc_provider/`, as `console_oidc.rs`), the HTTP port in plain HTTP (the
//! provider takes loopback redirects over `http://` only) and the client ports in mutual TLS.
//!
//! The console presents `[console] client_cert`, whose principal is given every operator and
//! admin role in `[auth]`: the people signed in still act as themselves (the request and the
//! approval are theirs in the audit), and one who lacks a role is refused although the
//! certificate has it. A replica without the setting says so on every page.
#![cfg(not(madsim))]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::console::{assert_refused, assert_shows, csrf, refused_rule, Browser};
use common::oidc_provider::Provider;
use common::pki::{Name, TestPki};
use common::{OidcCluster, Options, STABLE_ELECTIONS_MS};
use picket_client::{Client, ClientConfig, TlsConfig};
use reqwest::StatusCode;

const NS: &str = "orders";
const KEY: &str = "ledger/17";
/// The lock client's certificate principal (`picket-client:orders` only).
const SVC: &str = "spiffe://picket.test/svc/ledger";
/// The console's certificate principal, given every role (which must never reach a person).
const CONSOLE: &str = "spiffe://picket.test/picket-console";

/// Replica `i`'s `picketd` started by the test on its existing configuration and data; killed
/// (by its PID) when dropped.
struct Restarted(Child);

impl Drop for Restarted {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn restart(cluster: &OidcCluster, i: usize) -> Restarted {
    let dir = cluster.dir.path();
    let log = std::fs::File::create(dir.join(format!("node-{}.log", i + 1))).unwrap();
    Restarted(
        Command::new(env!("CARGO_BIN_EXE_picketd"))
            .arg("run")
            .arg("--config")
            .arg(dir.join(format!("node-{}.toml", i + 1)))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_in_people_act_as_themselves_through_the_consoles_client_certificate() {
    let provider = Provider::start().await;
    let files = tempfile::tempdir().unwrap();
    let pki = TestPki::new(&files.path().join("pki"));
    let console_cert = pki.client("console", Name::Uri(CONSOLE));
    let svc_cert = pki.client("svc", Name::Uri(SVC));
    let secret = files.path().join("console-secret");
    std::fs::write(&secret, "console-secret\n").unwrap();
    let extra = format!(
        "[oidc]\nissuer = {issuer:?}\naudiences = [\"picket\"]\n\
         [oidc.console]\nclient_id = \"picket-console\"\nclient_secret_file = {secret:?}\n\
         [tls]\ncert = {:?}\nkey = {:?}\nca = {:?}\nrequire_client_cert = true\nhttp = false\n\
         [auth]\ncertificate_roles = []\n[auth.certificate_principal_roles]\n\
         {SVC:?} = [\"picket-client:orders\"]\n\
         {CONSOLE:?} = [\"picket-operator\", \"picket-incident-commander\", \"picket-admin\"]\n\
         [console]\nclient_cert = {:?}\nclient_key = {:?}\n",
        pki.node.cert,
        pki.node.key,
        pki.ca,
        console_cert.cert,
        console_cert.key,
        issuer = provider.issuer,
    );
    let mut cluster = OidcCluster::start_with(Options {
        oidc: false,
        extra,
        election_timeout_ms: STABLE_ELECTIONS_MS,
        ..Options::default()
    });
    cluster.leader(Duration::from_secs(20)).await;
    let issuer = provider.issuer.clone();
    let console = cluster.http[0].clone();
    let logs = cluster.logs();
    assert!(
        logs.contains("the console presents its client certificate"),
        "{logs}"
    );

    // The service holds the key, over mutual TLS with its own certificate.
    let mut config = ClientConfig::new(
        cluster
            .endpoints
            .iter()
            .map(|e| e.replace("http://", "https://"))
            .collect::<Vec<String>>(),
        "ledger-writer",
    );
    config.tls = Some(
        TlsConfig::from_files(Some(&pki.ca), Some(&svc_cert.cert), Some(&svc_cert.key)).unwrap(),
    );
    let worker = Client::new(config).unwrap().create_session().await.unwrap();
    let held = worker.lock(NS, KEY).await.unwrap();
    let token = held.token().0.to_string();

    // Alice (picket-operator) signs in: the overview and the key page read the cluster through
    // the console's certificate, as her.
    let mut alice = Browser::new();
    let page = alice.sign_in(&issuer, &console, "alice", "alice-pw").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let page = alice.get(&format!("{console}/console/")).await;
    assert_shows(
        &page,
        "Signed in as <strong>alice</strong> (picket-operator)",
    );
    assert!(page.body.contains(KEY), "the longest hold: {}", page.body);
    let key_page = format!("{console}/console/keys/{NS}/{KEY}");
    let page = alice.get(&key_page).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains(SVC), "the holder: {}", page.body);
    assert!(page.body.contains(&token), "the token: {}", page.body);

    // Bob has picket-admin only: the request needs picket-operator, which the console's
    // certificate has; his token decides, and the server refuses him.
    let form = [
        ("token", token.clone()),
        ("reason", "ledger writer wedged".to_owned()),
        ("revoke", "on".to_owned()),
        ("stopped", "yes".to_owned()),
        ("double_run", "no".to_owned()),
    ];
    let request = format!("{console}/console/request/{NS}/{KEY}");
    let mut bob = Browser::new();
    let page = bob.sign_in(&issuer, &console, "bob", "bob-pw").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let page = bob.submit(&key_page, &request, &form).await;
    assert_refused(&page, "missing_role");
    assert!(page.body.contains("`bob`"), "{}", page.body);
    // Carol has no Picket role at all: not even signed in, whatever the certificate may do.
    let mut carol = Browser::new();
    let page = carol.sign_in(&issuer, &console, "carol", "carol-pw").await;
    assert_refused(&page, "missing_role");

    // Alice requests; Dana (incident commander) approves on the page Alice's request links to.
    let page = alice.submit(&key_page, &request, &form).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    let approval = format!("{console}{}", page.location);
    assert!(approval.contains("/console/force-releases/"), "{approval}");
    let mut dana = Browser::new();
    let page = dana.sign_in(&issuer, &console, "dana", "dana-pw").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let page = dana.get(&approval).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("alice"), "the requester: {}", page.body);
    let page = dana
        .post(
            &format!("{approval}/approve"),
            &[("csrf", &csrf(&page.body)), ("kind", "advisory")],
        )
        .await;
    assert!(
        page.status == StatusCode::SEE_OTHER || page.status == StatusCode::OK,
        "{}",
        page.body
    );
    tokio::time::timeout(Duration::from_secs(15), held.lost())
        .await
        .expect("the holder learns its loss");

    // The verify page asks every replica's HTTP port when the holder was told, with Dana's
    // token (the HTTP ports ask for no client certificate): every one answers.
    let page = dana
        .get(&format!("{console}/console/verify/{NS}/{KEY}"))
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("id=\"told-state\""), "{}", page.body);
    assert!(
        !page.body.contains("Not every replica answered"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("Not yet told"), "{}", page.body);

    // The audit says who requested and who approved: the people, not the certificate.
    let page = dana
        .get(&format!(
            "{console}/console/audit?namespace={NS}&format=json"
        ))
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let audit: serde_json::Value = serde_json::from_str(&page.body).unwrap();
    let records = audit["records"].as_array().unwrap();
    let actors: Vec<(&str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap_or_default(),
                r["actor"].as_str().unwrap_or_default(),
                r["actor_roles"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        actors.contains(&("force-release requested", "alice", "picket-operator")),
        "{actors:?}"
    );
    assert!(
        actors.contains(&(
            "force-release approved",
            "dana",
            "picket-incident-commander"
        )),
        "{actors:?}"
    );
    assert!(
        !page.body.contains(CONSOLE),
        "the console's certificate acted for nobody: {}",
        page.body
    );

    // Replica 3 without [console] client_cert: a WARN at start, and its pages name the setting
    // instead of a bare `unavailable`.
    // (Its sign-ins come back to its own callback, not to the external URL's replica 1.)
    cluster.stop(2);
    let bare = cluster.http[2].clone();
    let path = cluster.dir.path().join("node-3.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text
        .lines()
        .filter(|l| !l.starts_with("client_cert =") && !l.starts_with("client_key ="))
        .map(|l| {
            if l.starts_with("client_id = ") {
                format!("{l}\nredirect_url_base = {bare:?}")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&path, text).unwrap();
    let _replica_3 = restart(&cluster, 2);
    common::eventually(Duration::from_secs(20), "replica 3 answers", || async {
        matches!(common::get(&format!("{bare}/healthz")).await, Ok((200, _))).then_some(())
    })
    .await;
    let log = std::fs::read_to_string(cluster.dir.path().join("node-3.log")).unwrap();
    assert!(
        log.contains("WARN") && log.contains("[console] client_cert / client_key are not set"),
        "{log}"
    );
    let mut erin = Browser::new();
    let page = erin.sign_in(&issuer, &bare, "alice", "alice-pw").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for path in ["/console/", &format!("/console/keys/{NS}/{KEY}")] {
        let page = erin.get(&format!("{bare}{path}")).await;
        assert_eq!(
            page.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            page.body
        );
        assert_eq!(
            refused_rule(&page),
            "console_client_cert_missing",
            "{}",
            page.body
        );
        assert!(page.body.contains("[console] client_cert"), "{}", page.body);
    }
}
