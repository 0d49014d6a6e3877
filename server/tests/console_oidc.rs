//! The console's OpenID Connect sign-in against a real OpenID Provider: panva's certified
//! `oidc-provider` on Node (`tests/oidc_provider/`, installed from its lock file by
//! `scripts/test`), issuing Keycloak-shaped tokens, in front of three real `picketd` with
//! `[oidc]` (keys through discovery) and `[oidc.console]`. The flow is walked over HTTP as a
//! browser does: the console's redirect to the provider, its login form, the redirect back with
//! the code, the console's exchange with the PKCE verifier.
#![cfg(not(madsim))]

mod common;

use common::console::{
    assert_refused, assert_shows, csrf, param, refused_rule, with_param, Browser,
};
use common::oidc_provider::{cluster_for, Provider};
use picket_client::{Client, ClientConfig, Credentials};
use reqwest::StatusCode;

const NS: &str = "orders";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_to_the_console_at_a_real_openid_provider() {
    let provider = Provider::start().await;
    let (cluster, _secret_dir) = cluster_for(&provider).await;
    let console = cluster.http[0].clone();
    let issuer = provider.issuer.clone();

    // A worker holds a lock, with its own token from the provider (client credentials).
    let mut config = ClientConfig::new(cluster.endpoints.clone(), "ledger-writer");
    config.credentials = Credentials {
        bearer: Some(provider.worker_token().await),
        ..Credentials::default()
    };
    let worker = Client::new(config).unwrap().create_session().await.unwrap();
    let held = worker.lock(NS, "ledger/17").await.unwrap();
    let token = held.token().0.to_string();

    // Signed out: a page sends the browser to the sign-in, which sends it to the provider with
    // the code flow's parameters.
    let mut alice = Browser::new();
    let page = alice.get(&format!("{console}/console/")).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    let authorize = alice.begin(&console).await;
    assert!(
        authorize.starts_with(&format!("{issuer}/auth?")),
        "{authorize}"
    );
    assert_eq!(param(&authorize, "response_type"), "code");
    assert_eq!(param(&authorize, "client_id"), "picket-console");
    assert_eq!(param(&authorize, "code_challenge_method"), "S256");
    assert_eq!(param(&authorize, "code_challenge").len(), 43);
    assert_eq!(
        param(&authorize, "redirect_uri"),
        format!("{console}/console/oidc/callback")
    );
    assert_ne!(param(&authorize, "state"), param(&authorize, "nonce"));

    // Alice logs in at the provider; the console verifies the answer and signs her in.
    let callback = alice
        .log_in(&issuer, &authorize, &console, "alice", "alice-pw")
        .await;
    let page = alice.get(&callback).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.set.iter().any(|c| c.starts_with("picket_console=")),
        "{:?}",
        page.set
    );
    let page = alice.get(&format!("{console}/console/")).await;
    assert_shows(
        &page,
        "Signed in as <strong>alice</strong> (picket-operator)",
    );

    // The same answer again (a replayed state): refused, and nobody is signed in by it.
    let mut replay = Browser::new();
    replay.cookies = alice.cookies.clone();
    replay.cookies.remove("picket_console");
    let page = replay.get(&callback).await;
    assert_eq!(page.status, StatusCode::FORBIDDEN);
    assert_eq!(refused_rule(&page), "state_unknown", "{}", page.body);
    assert!(!page.set.iter().any(|c| c.starts_with("picket_console=")));
    // A forged state: refused the same way.
    let forged = with_param(&callback, "state", "forged-state");
    let page = alice.get(&forged).await;
    assert_eq!(refused_rule(&page), "state_unknown", "{}", page.body);

    // Alice, an operator, requests a force-release of the worker's hold: the server allows it.
    let page = alice
        .get(&format!("{console}/console/keys/{NS}/ledger/17"))
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let form = [
        ("csrf", csrf(&page.body)),
        ("token", token.clone()),
        ("reason", "ledger writer wedged".to_owned()),
        ("revoke", "on".to_owned()),
        ("stopped", "yes".to_owned()),
        ("double_run", "no".to_owned()),
    ];
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let page = alice
        .post(&format!("{console}/console/request/{NS}/ledger/17"), &form)
        .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
    assert!(page.location.starts_with("/console/force-releases/"));

    // Bob has only picket-admin: signed in, but the request needs picket-operator, and the
    // server says so.
    let mut bob = Browser::new();
    let page = bob.sign_in(&issuer, &console, "bob", "bob-pw").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let page = bob
        .get(&format!("{console}/console/keys/{NS}/ledger/17"))
        .await;
    assert!(page
        .body
        .contains("Signed in as <strong>bob</strong> (picket-admin)"));
    let mut form = form.clone();
    let bob_csrf = csrf(&page.body);
    form[0] = ("csrf", &bob_csrf);
    let page = bob
        .post(&format!("{console}/console/request/{NS}/ledger/17"), &form)
        .await;
    assert_refused(&page, "missing_role");
    assert!(page.body.contains("picket-operator"), "{}", page.body);

    // Carol has no Picket role at all: the sign-in itself is refused, naming the rule.
    let mut carol = Browser::new();
    let page = carol.sign_in(&issuer, &console, "carol", "carol-pw").await;
    assert_refused(&page, "missing_role");
    assert!(!page.set.iter().any(|c| c.starts_with("picket_console=")));

    // A code exchanged with another sign-in's PKCE verifier: Dave begins two sign-ins, logs in
    // for the first, and brings its code back with the second one's state. The console
    // exchanges it with the second verifier; the provider refuses.
    let mut dave = Browser::new();
    let first = dave.begin(&console).await;
    let second = dave.begin(&console).await;
    let callback = dave
        .log_in(&issuer, &first, &console, "alice", "alice-pw")
        .await;
    let crossed = with_param(&callback, "state", &param(&second, "state"));
    let page = dave.get(&crossed).await;
    assert_refused(&page, "code_refused");
    assert!(page.body.contains("invalid_grant"), "{}", page.body);
    assert!(!dave.cookies.contains_key("picket_console"));

    // An answer for a sign-in begun in another browser (no pre-sign-in cookie): refused.
    let mut erin = Browser::new();
    let begun = erin.begin(&console).await;
    let mut mallory = Browser::new();
    let stolen = format!(
        "{console}/console/oidc/callback?code=whatever&state={}",
        param(&begun, "state")
    );
    let page = mallory.get(&stolen).await;
    assert_eq!(
        refused_rule(&page),
        "state_not_this_browser",
        "{}",
        page.body
    );

    // Sign-out ends the console sign-in, and links to the provider's end_session_endpoint.
    let page = alice.get(&format!("{console}/console/")).await;
    let page = alice
        .post(
            &format!("{console}/console/signout"),
            &[("csrf", &csrf(&page.body))],
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(
        page.body
            .contains(&format!("{issuer}/session/end?client_id=picket-console")),
        "{}",
        page.body
    );
    assert!(!alice.cookies.contains_key("picket_console"));
    let page = alice.get(&format!("{console}/console/")).await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert!(page.location.starts_with("/console/signin"));

    drop(held);
    drop(cluster);
    drop(provider);
}
