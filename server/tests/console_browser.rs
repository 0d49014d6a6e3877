//! The console in a real browser: Debian's headless Chromium, driven through chromedriver
//! (WebDriver). Two people in two browsers walk the on-call journey against three `picketd`
//! with OpenID Connect on, signing in at a real OpenID Provider (npm's `oidc-provider`,
//! `tests/oidc_provider/`): the alert's link, sign-in at the provider, the key page with its
//! FENCED banner, the request, the requester not offered the approval, the second person's
//! approval with the kind typed, the first person's key page following the hand-off live (no
//! reload), the second person's verify page (the old holder told of its loss, the queue
//! draining live) and the audit naming both with their roles. The other cases sign in through
//! the dev sign-in of a dev cluster.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`; `scripts/test` installs them). chromedriver is started on a loopback port
//! and killed by PID when the test ends, whatever happens. Screenshots of every step go to
//! `$CARGO_TARGET_TMPDIR/console-screens/`; with `PICKET_CONSOLE_SCREENSHOTS=docs/console` they
//! also replace the ones docs/console.md shows.
#![cfg(not(madsim))]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::oidc_provider::{cluster_for, Provider};
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client as Browser, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use picket_client::{Client, ClientConfig, Credentials, Session};
use picket_proto::proto;
use picket_server::config::ForceReleases;
use picket_server::dev::{free_port, DevCluster, DevOptions};
use serde_json::json;

const NS: &str = "orders";
const KEY: &str = "ledger/17";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver, killed (by PID) and reaped when dropped, with every Chromium process it started
/// (found by their profile directory, under `profiles`, in `/proc/*/cmdline`), even when the test
/// failed before closing its browsers.
struct Driver {
    child: Child,
    url: String,
    profiles: PathBuf,
}

impl Driver {
    async fn start(profiles: PathBuf) -> Driver {
        for tool in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(tool).exists(),
                "{tool} is missing: install Debian's chromium and chromium-driver (scripts/test does)"
            );
        }
        let port = free_port().unwrap();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            profiles,
        };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return driver;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not listen on {}", driver.url);
    }

    /// A browser of its own (its own profile, so its own cookies).
    async fn browser(&self, name: &str) -> Browser {
        let profile = self.profiles.join(name);
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), json!("chrome"));
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,1100", "--no-first-run", "--no-default-browser-check",
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("chromium starts under chromedriver")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mark = self.profiles.display().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&mark) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Saves a screenshot of the browser's page as `name.png`.
async fn shot(browser: &Browser, name: &str) {
    let png = browser.screenshot().await.unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screens");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    if let Ok(docs) = std::env::var("PICKET_CONSOLE_SCREENSHOTS") {
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(docs);
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join(format!("{name}.png")), &png).unwrap();
    }
}

/// The visible text of the first element matching `css`, waiting up to 10 s for it (and reading
/// again when the page was replaced under the read: a navigation or a live refresh).
async fn text_of(browser: &Browser, css: &str) -> String {
    let mut last = String::new();
    for _ in 0..100 {
        let found = browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await;
        match found {
            Ok(element) => match element.text().await {
                Ok(text) => return text,
                Err(error) => last = error.to_string(),
            },
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css}: {last}");
}

async fn fill(browser: &Browser, css: &str, text: &str) {
    let field = browser.find(Locator::Css(css)).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

async fn click(browser: &Browser, css: &str) {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .unwrap();
}

/// Waits until the page's body text contains `text`.
async fn until_text(browser: &Browser, text: &str, what: &str) {
    for _ in 0..100 {
        let body = text_of(browser, "body").await;
        if body.contains(text) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: the page never showed {text:?}");
}

/// The texts of every element matching `css`, in order (read again when a live refresh
/// replaced them under the read).
async fn column(browser: &Browser, css: &str) -> Vec<String> {
    for _ in 0..50 {
        let mut texts = Vec::new();
        let mut stale = false;
        for cell in browser.find_all(Locator::Css(css)).await.unwrap() {
            match cell.text().await {
                Ok(text) => texts.push(text),
                Err(_) => stale = true,
            }
        }
        if !stale {
            return texts;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css}: replaced under every read");
}

/// Signs in at the test OpenID Provider's login form, where the console sent the browser, as
/// the provider's user `user` (password `<user>-pw`, tests/oidc_provider/provider.js).
async fn sign_in_at_provider(browser: &Browser, provider: &Provider, user: &str) {
    text_of(browser, "input[name=login]").await;
    let url = browser.current_url().await.unwrap();
    assert!(url.as_str().starts_with(&provider.issuer), "{url}");
    fill(browser, "input[name=login]", user).await;
    fill(browser, "input[name=password]", &format!("{user}-pw")).await;
    click(browser, "button[type=submit]").await;
}

/// Signs in at the dev sign-in with exactly `roles` ticked.
async fn sign_in_with(browser: &Browser, principal: &str, roles: &[&str]) {
    let url = browser.current_url().await.unwrap();
    assert!(url.path().ends_with("/console/signin"), "{url}");
    assert!(text_of(browser, "body")
        .await
        .contains("INSECURE DEV SIGN-IN"));
    for role in [
        "picket-operator",
        "picket-incident-commander",
        "picket-admin",
    ] {
        let css = format!("#role-{role}");
        let ticked = browser
            .find(Locator::Css(&css))
            .await
            .unwrap()
            .prop("checked")
            .await
            .unwrap();
        if (ticked.as_deref() == Some("true")) != roles.contains(&role) {
            click(browser, &css).await;
        }
    }
    fill(browser, "#principal", principal).await;
    click(browser, "form button[type=submit]").await;
}

fn admin_client(cluster: &DevCluster, principal: &str, roles: &str) -> Client {
    let mut config = ClientConfig::new(cluster.client_endpoints(), "console-test");
    config.credentials = common::dev_credentials(principal, roles);
    Client::new(config).unwrap()
}

async fn inspect(client: &Client, key: &str) -> proto::KeyInfo {
    common::inspect_key(client, NS, key).await
}

async fn classes_of(client: &Client) -> Vec<proto::ClassSpec> {
    client
        .list_classes(proto::ListClassesRequest {
            namespace: NS.into(),
            allow_stale: false,
        })
        .await
        .unwrap()
        .classes
}

/// Requests a force-release from the key page open in `browser` (the token pre-filled; an
/// advisory key's checklist answered); returns the approval page's path.
async fn request_from_key_page(browser: &Browser, reason: &str) -> String {
    if browser.find(Locator::Id("checklist")).await.is_ok() {
        click(browser, "#stopped-yes").await;
        click(browser, "#double-no").await;
    }
    fill(browser, "#reason", reason).await;
    click(browser, "#request-form button[type=submit]").await;
    until_text(browser, "You made this request", "the approval page").await;
    browser.current_url().await.unwrap().path().to_owned()
}

async fn service(cluster: &DevCluster, name: &str) -> Session {
    service_at(cluster.client_endpoints(), name, Credentials::default()).await
}

/// A service's session (on host `worker-7`, a 10 s TTL) with `credentials`.
async fn service_at(endpoints: Vec<String>, name: &str, credentials: Credentials) -> Session {
    let mut config = ClientConfig::new(endpoints, name);
    config.identity_host = "worker-7".to_owned();
    config.session_ttl = Some(Duration::from_secs(10));
    config.credentials = credentials;
    Client::new(config).unwrap().create_session().await.unwrap()
}

/// The whole journey, with OpenID Connect on: three `picketd` processes trusting the real test
/// provider (keys through its discovery document), two people each in their own Chromium
/// signing in there (authorization code with PKCE), the console's cookie sign-in and CSRF
/// tokens, roles from the tokens' `realm_access.roles`: Alice (`picket-operator`, on-call)
/// pages, inspects, judges and requests; Dana (`picket-incident-commander`) approves on another
/// replica, verifies the queue draining live and reviews the audit, which names both as the
/// provider's users with their roles. (The dev sign-in is walked by the cases below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_people_walk_the_journey_in_chromium() {
    let provider = Provider::start().await;
    let (cluster, _secret) = cluster_for(&provider).await;
    let admin = Client::new({
        let mut config = ClientConfig::new(cluster.endpoints.clone(), "console-test");
        config.credentials = common::bearer(provider.setup_token().await);
        config
    })
    .unwrap();
    common::put_class(&admin, NS, common::owned_class("ledger", 30_000, 1, "")).await;
    // The services, with the provider's token for the lock client `worker`.
    let worker = common::bearer(provider.worker_token().await);
    let endpoints = cluster.endpoints.clone();
    let stuck = service_at(endpoints.clone(), "ledger-writer", worker.clone()).await;
    let held = stuck.lock(NS, KEY).await.unwrap();
    let waiter = service_at(endpoints.clone(), "ledger-writer-2", worker.clone()).await;
    let next = tokio::spawn(async move {
        let guard = waiter.lock(NS, KEY).await.unwrap();
        (guard, waiter)
    });
    // A second waiter behind the first, so that the verify page sees the queue drain.
    common::until_queue(&admin, NS, KEY, 1).await;
    let third = service_at(endpoints.clone(), "ledger-writer-3", worker.clone()).await;
    let last = tokio::spawn(async move {
        let guard = third.lock(NS, KEY).await.unwrap();
        (guard, third)
    });
    common::until_queue(&admin, NS, KEY, 2).await;

    let profiles = tempfile::tempdir().unwrap();
    let driver = Driver::start(profiles.path().to_owned()).await;
    let alice = driver.browser("alice").await;
    let dana = driver.browser("dana").await;

    // Alice follows the alert's console link (the metric's console_url: key as one segment);
    // signed out, it leads to the provider's login form and, after it, back to that page.
    let base = cluster.http[0].clone();
    let alert_link = format!("/console/keys/{NS}/ledger%2F17");
    alice.goto(&format!("{base}{alert_link}")).await.unwrap();
    sign_in_at_provider(&alice, &provider, "alice").await;
    until_text(
        &alice,
        "ledger-writer on worker-7",
        "the key page after sign-in",
    )
    .await;
    assert_eq!(
        alice.current_url().await.unwrap().path(),
        format!("/console/keys/{NS}/{KEY}"),
        "back at the alert link's key page"
    );
    let who = text_of(&alice, "form.who").await;
    assert!(
        who.contains("Signed in as alice (picket-operator)"),
        "{who}"
    );
    let banner = text_of(&alice, "#kind-banner").await;
    assert!(banner.contains("FENCED"), "{banner}");
    assert!(
        banner.contains("refuse the old holder's writes"),
        "{banner}"
    );
    let token = text_of(&alice, "code.token").await;
    assert_eq!(token, held.token().0.to_string());
    let live = text_of(&alice, "#live-status").await;
    assert!(live.starts_with("Live:"), "{live}");
    shot(&alice, "2-key-page").await;

    // Judge and request: the token is pre-filled, revocation is on, and the hint says how the
    // holder learns of it.
    let prefilled = alice
        .find(Locator::Id("token"))
        .await
        .unwrap()
        .prop("value")
        .await
        .unwrap();
    assert_eq!(prefilled.as_deref(), Some(token.as_str()));
    let revoke = alice
        .find(Locator::Id("revoke"))
        .await
        .unwrap()
        .prop("checked")
        .await
        .unwrap();
    assert_eq!(revoke.as_deref(), Some("true"));
    let hint = text_of(&alice, "#revoke-hint").await;
    assert!(
        hint.contains("at once on its session stream") && hint.contains("next keepalive"),
        "{hint}"
    );
    fill(&alice, "#reason", "writer wedged since the deploy").await;
    fill(&alice, "#incident", "INC-7").await;
    click(&alice, "#request-form button[type=submit]").await;
    until_text(&alice, "You made this request", "the approval page").await;
    assert!(alice.find(Locator::Id("approve-form")).await.is_err());
    let approval = alice.current_url().await.unwrap();
    assert!(approval.path().starts_with("/console/force-releases/"));
    shot(&alice, "3-requested").await;

    // Alice goes back to the key and keeps it open.
    alice
        .goto(&format!("{base}/console/keys/{NS}/{KEY}"))
        .await
        .unwrap();
    until_text(&alice, "Live: following the lock log", "the live stream").await;
    assert!(text_of(&alice, "#key-state")
        .await
        .contains("ledger-writer on worker-7"));

    // Dana opens the link Alice sent her (on another replica), signs in at the provider and
    // approves as the incident commander.
    let approval_path = approval.path().to_owned();
    dana.goto(&format!("{}{approval_path}", cluster.http[1]))
        .await
        .unwrap();
    sign_in_at_provider(&dana, &provider, "dana").await;
    until_text(&dana, "The key now", "the approval page").await;
    assert_eq!(dana.current_url().await.unwrap().path(), approval_path);
    let compare = text_of(&dana, ".compare").await;
    assert!(
        compare.contains("writer wedged since the deploy [incident INC-7]"),
        "{compare}"
    );
    assert!(compare.contains("alice (picket-operator)"), "{compare}");
    let form = text_of(&dana, "#approve-form").await;
    assert!(
        form.contains("You approve as dana (picket-incident-commander)"),
        "{form}"
    );
    shot(&dana, "4-approval").await;
    fill(&dana, "#kind", "advisory").await;
    click(&dana, "#approve-form button[type=submit]").await;
    until_text(&dana, "fenced_not_acknowledged", "the refusal in words").await;
    shot(&dana, "5-refused").await;
    fill(&dana, "#kind", "fenced").await;
    click(&dana, "#approve-form button[type=submit]").await;
    until_text(&dana, "approved", "the outcome").await;
    let outcome = text_of(&dana, "main").await;
    assert!(
        outcome.contains("was revoked in the same revision"),
        "{outcome}"
    );
    shot(&dana, "6-approved").await;

    // Alice's page follows the hand-off without a reload.
    let (next_guard, _waiter) = tokio::time::timeout(Duration::from_secs(15), next)
        .await
        .expect("the waiter is granted")
        .unwrap();
    until_text(
        &alice,
        &format!("{}", next_guard.token().0),
        "the new holder's token on the live page",
    )
    .await;
    let state = text_of(&alice, "#key-state").await;
    assert!(state.contains("ledger-writer-2 on worker-7"), "{state}");
    assert!(text_of(&alice, "#live-status")
        .await
        .contains("updated at revision"));
    shot(&alice, "7-live-hand-off").await;

    // Dana verifies from the outcome: the release in the lock log, the queue, the old holder.
    click(&dana, "a[href^='/console/verify/']").await;
    until_text(
        &dana,
        "When the old holder's client learned its loss",
        "the verify page",
    )
    .await;
    let release = text_of(&dana, "#release").await;
    assert!(
        release.contains(&format!(
            "token {} of session {}",
            held.token().0,
            stuck.id()
        )),
        "{release}"
    );
    assert!(
        release.contains("revoked in the same revision"),
        "{release}"
    );
    assert!(text_of(&dana, "#alert-state")
        .await
        .contains("no Alertmanager is configured"));
    // The revoked session's client was pushed its end (the page polls for it).
    until_text(
        &dana,
        "pushed on its session stream",
        "when the holder learned it",
    )
    .await;
    let told = text_of(&dana, "#told-state").await;
    assert!(told.starts_with("✔ Told"), "{told}");
    assert_eq!(
        column(&dana, "#queue-table td.depth").await,
        ["0", "1", "2", "1", "1"]
    );
    dana.execute("window.picketMark = 'no reload';", vec![])
        .await
        .unwrap();
    until_text(
        &dana,
        "Live: following the lock log",
        "the verify page's live stream",
    )
    .await;
    shot(&dana, "8-verify").await;

    // The queue drains, live: the first waiter lets go, the second holds, nobody waits.
    drop(next_guard);
    let (last_guard, _third) = tokio::time::timeout(Duration::from_secs(15), last)
        .await
        .expect("the second waiter is granted")
        .unwrap();
    until_text(&dana, "ledger-writer-3 on worker-7", "the drained queue").await;
    assert!(text_of(&dana, "#held-now").await.ends_with("; 0 waiting"));
    assert_eq!(
        column(&dana, "#queue-table td.depth").await,
        ["0", "1", "2", "1", "0", "0"]
    );
    let mark = dana
        .execute("return window.picketMark;", vec![])
        .await
        .unwrap();
    assert_eq!(mark, json!("no reload"), "the page was not reloaded");
    dana.execute(
        "document.getElementById('queue-h').scrollIntoView();",
        vec![],
    )
    .await
    .unwrap();
    shot(&dana, "9-verify-drained").await;
    drop(last_guard);

    // Review: the key's audit names the requester and the approver as the provider's users,
    // with the roles their tokens gave them.
    click(&dana, "a[href^='/console/audit?']").await;
    until_text(&dana, "force-release approved", "the key's audit").await;
    let rows = column(&dana, "#audit-records tbody tr").await;
    let row = |action: &str| {
        rows.iter()
            .find(|r| r.contains(action))
            .unwrap_or_else(|| panic!("no {action} in {rows:?}"))
            .clone()
    };
    let requested = row("force-release requested");
    assert!(requested.contains("alice (picket-operator)"), "{requested}");
    let approved = row("force-release approved");
    assert!(
        approved.contains("dana (picket-incident-commander)"),
        "{approved}"
    );
    assert!(
        approved.contains("requested by alice (picket-operator)"),
        "{approved}"
    );
    assert!(approved.contains("revoke session: yes"), "{approved}");
    shot(&dana, "10-review").await;
    let audit = admin
        .query_audit(proto::QueryAuditRequest {
            namespace: Some(NS.into()),
            key: Some(KEY.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let approved = audit
        .records
        .iter()
        .find(|r| r.action == proto::AuditAction::ForceReleaseApproved as i32)
        .expect("the approval is audited");
    assert_eq!(approved.actor, "dana");
    assert_eq!(
        approved.actor_roles,
        [proto::Role::IncidentCommander as i32]
    );
    assert_eq!(approved.requester, "alice");
    assert_eq!(approved.requester_roles, [proto::Role::OnCall as i32]);

    alice.close().await.unwrap();
    dana.close().await.unwrap();
    drop(driver);
    drop(held);
    drop(cluster);
    drop(provider);
}

/// The classes page and what a change of kind does to a pending request, in Chromium, on one
/// cluster: a class admin creates a class (a value the state machine refuses comes back with its
/// rule next to the field, nothing registered); an on-call requests a force-release under it;
/// the admin changes the class's kind (the banner names the held key and the pending request; the
/// new kind is typed); the second person's approval page marks the change and the approval is
/// refused (`class_kind_changed`). Then a stale request (its holder changed since) is marked and
/// refused (`holder_changed`), and an on-call without `picket-admin` is told so in words and
/// refused by the server (`missing_role`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_and_a_kind_changed_under_a_pending_request_in_chromium() {
    let cluster = DevCluster::start().await.unwrap();
    cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .unwrap();
    let reader = admin_client(&cluster, "reader", "");
    let profiles = tempfile::tempdir().unwrap();
    let driver = Driver::start(profiles.path().to_owned()).await;
    let base = cluster.http_endpoint(0);

    // Carol, a class admin, creates the class; the state machine's rule first refuses a value.
    let carol = driver.browser("carol").await;
    carol
        .goto(&format!("{base}/console/classes"))
        .await
        .unwrap();
    sign_in_with(&carol, "carol", &["picket-admin"]).await;
    until_text(&carol, "Show classes", "the classes page").await;
    fill(&carol, "#classes-ns", NS).await;
    click(&carol, "#classes-namespace button[type=submit]").await;
    until_text(
        &carol,
        "No class is registered in orders",
        "an empty namespace",
    )
    .await;
    click(&carol, "#new-class").await;
    until_text(&carol, "New class in", "the class form").await;
    fill(&carol, "#class-name", "ledger").await;
    fill(&carol, "#class-prefix", "ledger/").await;
    click(&carol, "#kind-fenced").await;
    fill(&carol, "#class-ttl-max", "900000").await;
    fill(&carol, "#class-hold-max", "1").await;
    fill(&carol, "#class-owner", "team-ledger").await;
    fill(&carol, "#class-description", "ledger writes").await;
    click(&carol, "#class-form button[type=submit]").await;
    let error = text_of(&carol, "#class-ttl-max-error").await;
    assert!(
        error.contains("max session TTL 900000 ms is outside the cluster's bounds"),
        "{error}"
    );
    assert!(error.contains("bad_class"), "{error}");
    let described = carol
        .find(Locator::Id("class-ttl-max"))
        .await
        .unwrap()
        .attr("aria-describedby")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(described.contains("class-ttl-max-error"), "{described}");
    assert!(classes_of(&reader).await.is_empty(), "nothing registered");
    carol
        .execute(
            "document.getElementById('class-ttl-max').scrollIntoView({block: 'center'})",
            vec![],
        )
        .await
        .unwrap();
    shot(&carol, "c1-class-refused").await;
    fill(&carol, "#class-ttl-max", "30000").await;
    click(&carol, "#class-form button[type=submit]").await;
    until_text(&carol, "was created", "the class list").await;
    let table = text_of(&carol, "#classes").await;
    assert!(
        table.contains("ledger") && table.contains("FENCED") && table.contains("team-ledger"),
        "{table}"
    );
    shot(&carol, "c2-classes").await;

    // A worker holds a key of the class; Alice requests its force-release.
    let stuck = service(&cluster, "ledger-writer").await;
    let held = stuck.lock(NS, KEY).await.unwrap();
    let alice = driver.browser("alice").await;
    alice
        .goto(&format!("{base}/console/keys/{NS}/{KEY}"))
        .await
        .unwrap();
    sign_in_with(&alice, "alice", &["picket-operator"]).await;
    until_text(&alice, "ledger-writer on worker-7", "the key page").await;
    let fenced_request = request_from_key_page(&alice, "writer wedged").await;
    let id = fenced_request.rsplit('/').next().unwrap().to_owned();

    // Carol changes the class's kind: the banner first, nothing changed until she types it.
    carol
        .goto(&format!("{base}/console/classes?namespace={NS}"))
        .await
        .unwrap();
    click(&carol, "a[aria-label='Edit class ledger']").await;
    until_text(&carol, "Edit class", "the edit form").await;
    click(&carol, "#kind-advisory").await;
    click(&carol, "#class-form button[type=submit]").await;
    let banner = text_of(&carol, "#kind-change").await;
    assert!(banner.contains("from FENCED to ADVISORY"), "{banner}");
    assert!(banner.contains(&format!("request {id}")), "{banner}");
    assert!(banner.contains("class_kind_changed"), "{banner}");
    assert!(banner.contains(KEY), "the held key: {banner}");
    assert!(classes_of(&reader).await[0].fenced, "not changed yet");
    shot(&carol, "c3-kind-change").await;
    fill(&carol, "#confirm-kind", "advisory").await;
    click(&carol, "#class-form button[type=submit]").await;
    until_text(&carol, "was replaced", "the class list after the change").await;
    assert!(text_of(&carol, "#classes").await.contains("ADVISORY"));
    assert!(!classes_of(&reader).await[0].fenced);

    // Bob, on another replica, sees the change beside the request, and the server refuses.
    let bob = driver.browser("bob").await;
    bob.goto(&format!("{}{fenced_request}", cluster.http_endpoint(1)))
        .await
        .unwrap();
    sign_in_with(&bob, "bob", &["picket-operator"]).await;
    until_text(&bob, "The key now", "the approval page").await;
    let compare = text_of(&bob, ".compare").await;
    assert!(
        compare.contains(
            "changed since the request: approval will be refused (rule class_kind_changed)"
        ),
        "{compare}"
    );
    shot(&bob, "c4-kind-changed").await;
    fill(&bob, "#kind", "fenced").await;
    click(&bob, "#approve-form button[type=submit]").await;
    until_text(&bob, "Refused (rule class_kind_changed)", "the refusal").await;
    let now = inspect(&reader, KEY).await;
    assert_eq!(now.holders[0].token, held.token().0, "nothing released");

    // A stale request: made on another key, whose holder then changes.
    let other = stuck.lock(NS, "ledger/18").await.unwrap();
    alice
        .goto(&format!("{base}/console/keys/{NS}/ledger/18"))
        .await
        .unwrap();
    until_text(&alice, "ADVISORY", "the key page of the advisory class").await;
    let stale_request = request_from_key_page(&alice, "second writer wedged").await;
    other.release().await.unwrap();
    let newcomer = service(&cluster, "ledger-writer-3").await;
    let taken = newcomer.lock(NS, "ledger/18").await.unwrap();
    bob.goto(&format!("{}{stale_request}", cluster.http_endpoint(1)))
        .await
        .unwrap();
    until_text(&bob, "The key now", "the stale request's page").await;
    let compare = text_of(&bob, ".compare").await;
    assert!(
        compare.contains("The holder or token changed since the request"),
        "{compare}"
    );
    assert!(compare.contains("ledger-writer-3"), "{compare}");
    shot(&bob, "c5-stale").await;
    fill(&bob, "#kind", "advisory").await;
    click(&bob, "#approve-form button[type=submit]").await;
    until_text(&bob, "Refused (rule holder_changed)", "the refusal").await;
    let now = inspect(&reader, "ledger/18").await;
    assert_eq!(
        now.holders[0].token,
        taken.token().0,
        "the new holder keeps it"
    );

    // Alice has no picket-admin: the page says so, and the server refuses her edit.
    alice
        .goto(&format!("{base}/console/classes?namespace={NS}"))
        .await
        .unwrap();
    let note = text_of(&alice, "#role-note").await;
    assert!(note.contains("needs the role picket-admin"), "{note}");
    assert!(alice.find(Locator::Id("new-class")).await.is_err());
    alice
        .goto(&format!(
            "{base}/console/classes/edit?namespace={NS}&prefix=ledger%2F"
        ))
        .await
        .unwrap();
    until_text(
        &alice,
        "You cannot change classes",
        "the role note on the form",
    )
    .await;
    fill(&alice, "#class-owner", "team-alice").await;
    click(&alice, "#class-form button[type=submit]").await;
    until_text(
        &alice,
        "Refused (rule missing_role)",
        "the server's refusal",
    )
    .await;
    shot(&alice, "c6-missing-role").await;
    assert_eq!(classes_of(&reader).await[0].owner, "team-ledger");

    for browser in [alice, bob, carol] {
        browser.close().await.unwrap();
    }
    drop(driver);
    drop((held, taken));
    cluster.shutdown().await;
}

/// On a cluster whose force-release requests live 4 s, in Chromium: a request form posted
/// without its CSRF token is refused and nothing is requested; the requester's approval, posted
/// by a script although the page does not offer it, is refused by the server
/// (`approver_is_requester`); the request expires, and its link then says so; sign-out ends the
/// sign-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csrf_self_approval_an_expired_request_and_sign_out_in_chromium() {
    let cluster = DevCluster::start_with(DevOptions {
        force_releases: ForceReleases { ttl_ms: 4_000 },
        ..DevOptions::default()
    })
    .await
    .unwrap();
    cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .unwrap();
    let reader = admin_client(&cluster, "reader", "");
    let carol = admin_client(&cluster, "carol", "picket-admin");
    common::put_class(&carol, NS, common::fenced_class("ledger", 10_000, 30_000)).await;
    let stuck = service(&cluster, "ledger-writer").await;
    let held = stuck.lock(NS, KEY).await.unwrap();
    let profiles = tempfile::tempdir().unwrap();
    let driver = Driver::start(profiles.path().to_owned()).await;
    let base = cluster.http_endpoint(0);
    let alice = driver.browser("alice").await;
    alice
        .goto(&format!("{base}/console/keys/{NS}/{KEY}"))
        .await
        .unwrap();
    shot(&alice, "1-sign-in").await;
    sign_in_with(&alice, "alice", &["picket-operator"]).await;
    until_text(&alice, "ledger-writer on worker-7", "the key page").await;

    // The form without its CSRF token (as another site's page would post it).
    alice
        .execute(
            "document.querySelector('#request-form input[name=csrf]').remove()",
            vec![],
        )
        .await
        .unwrap();
    fill(&alice, "#reason", "writer wedged").await;
    click(&alice, "#request-form button[type=submit]").await;
    until_text(&alice, "csrf_token_invalid", "the CSRF refusal").await;
    assert!(inspect(&reader, KEY)
        .await
        .pending_force_releases
        .is_empty());

    // The request, then its approval by the requester, posted by a script: refused.
    alice
        .goto(&format!("{base}/console/keys/{NS}/{KEY}"))
        .await
        .unwrap();
    until_text(&alice, "ledger-writer on worker-7", "the key page").await;
    let request = request_from_key_page(&alice, "writer wedged").await;
    assert!(alice.find(Locator::Id("approve-form")).await.is_err());
    alice
        .execute(
            r#"const form = document.createElement("form");
               form.method = "post";
               form.action = location.pathname + "/approve";
               for (const [name, value] of [["csrf", document.querySelector("input[name=csrf]").value], ["kind", "fenced"]]) {
                 const input = document.createElement("input");
                 input.type = "hidden"; input.name = name; input.value = value;
                 form.appendChild(input);
               }
               document.body.appendChild(form);
               form.submit();"#,
            vec![],
        )
        .await
        .unwrap();
    until_text(
        &alice,
        "Refused (rule approver_is_requester)",
        "the self-approval",
    )
    .await;
    shot(&alice, "b1-self-approval-refused").await;
    assert_eq!(inspect(&reader, KEY).await.holders[0].token, held.token().0);

    // It expires: the countdown says so, and then the link says what became of it.
    for _ in 0..150 {
        if text_of(&alice, ".countdown").await == "expired" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(text_of(&alice, ".countdown").await, "expired");
    let bob = driver.browser("bob").await;
    bob.goto(&format!("{}{request}", cluster.http_endpoint(1)))
        .await
        .unwrap();
    sign_in_with(&bob, "bob", &["picket-operator"]).await;
    until_text(&bob, "has expired", "the expired request's page").await;
    let outcome = text_of(&bob, "main").await;
    assert!(outcome.contains("by alice"), "{outcome}");
    assert!(outcome.contains("nothing was released"), "{outcome}");
    assert!(bob.find(Locator::Id("approve-form")).await.is_err());
    shot(&bob, "b2-expired").await;
    assert_eq!(inspect(&reader, KEY).await.holders[0].token, held.token().0);

    // Sign-out: the next page leads to the sign-in.
    click(&alice, "form.who button[type=submit]").await;
    until_text(&alice, "INSECURE DEV SIGN-IN", "the sign-in after sign-out").await;
    alice
        .goto(&format!("{base}/console/keys/{NS}/{KEY}"))
        .await
        .unwrap();
    let url = alice.current_url().await.unwrap();
    assert!(url.path().ends_with("/console/signin"), "{url}");

    alice.close().await.unwrap();
    bob.close().await.unwrap();
    drop(driver);
    drop(held);
    cluster.shutdown().await;
}

/// Presses `key` as a keyboard does (WebDriver key actions on whatever has the focus).
async fn press(browser: &Browser, key: Key) {
    let key: char = key.into();
    browser
        .perform_actions(
            KeyActions::new("keyboard".into())
                .then(KeyAction::Down { value: key })
                .then(KeyAction::Up { value: key }),
        )
        .await
        .unwrap();
}

/// Types `text` into whatever has the focus.
async fn type_text(browser: &Browser, text: &str) {
    let mut keys = KeyActions::new("keyboard".into());
    for c in text.chars() {
        keys = keys
            .then(KeyAction::Down { value: c })
            .then(KeyAction::Up { value: c });
    }
    browser.perform_actions(keys).await.unwrap();
}

/// Presses Tab until the focus is on the element matching `css`: the elements the focus passed
/// on its way (`tag#id`), or a panic when 60 presses do not get there.
async fn tab_to(browser: &Browser, css: &str) -> Vec<String> {
    let mut passed = Vec::new();
    for _ in 0..60 {
        press(browser, Key::Tab).await;
        let here = browser
            .execute(
                "const e = document.activeElement;
                 return [e.matches(arguments[0]), e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')];",
                vec![json!(css)],
            )
            .await
            .unwrap();
        if here[0] == json!(true) {
            return passed;
        }
        passed.push(here[1].as_str().unwrap_or_default().to_owned());
    }
    panic!("{css} is not reachable with Tab; the focus passed {passed:?}");
}

/// The page's visible form controls that have no accessible name (no `<label for>`, wrapping
/// label, `aria-label`, `aria-labelledby`, or, for a button, no text).
async fn unlabelled_controls(browser: &Browser) -> Vec<String> {
    let found = browser
        .execute(
            r#"const named = (el) => {
                 const aria = (el.getAttribute("aria-label") || "").trim();
                 const by = (el.getAttribute("aria-labelledby") || "").split(/\s+/)
                   .map((id) => (document.getElementById(id) || {}).textContent || "").join(" ").trim();
                 const labels = Array.from(el.labels || []).map((l) => l.textContent).join(" ").trim();
                 const text = el.tagName === "BUTTON" ? el.textContent.trim() : "";
                 const value = el.type === "submit" ? (el.value || "").trim() : "";
                 return aria || by || labels || text || value;
               };
               return Array.from(document.querySelectorAll("input:not([type=hidden]), select, textarea, button"))
                 .filter((el) => !named(el)).map((el) => el.outerHTML.slice(0, 160));"#,
            vec![],
        )
        .await
        .unwrap();
    serde_json::from_value(found).unwrap()
}

/// How much wider than its window the page lays out (CSS pixels; 0: no sideways scrolling),
/// with the innermost elements that stick out.
async fn sideways_overflow(browser: &Browser) -> (i64, Vec<String>) {
    let found = browser
        .execute(
            r##"const d = document.documentElement;
               const out = Array.from(document.body.querySelectorAll("*"))
                 .filter((e) => e.getBoundingClientRect().right > d.clientWidth + 1)
                 .filter((e) => !Array.from(e.children).some((c) => c.getBoundingClientRect().right > d.clientWidth + 1))
                 .slice(0, 5)
                 .map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "") + ": " + (e.textContent || "").trim().slice(0, 60));
               return [d.scrollWidth - d.clientWidth, out];"##,
            vec![],
        )
        .await
        .unwrap();
    serde_json::from_value(found).unwrap()
}

/// docs/console.md, "Accessibility", on the page open in `browser`: every control labelled, and
/// nothing to scroll sideways at 200 % zoom (1280 px wide: 640 CSS px) nor in a narrow window
/// (420 px at 100 %); the window is put back afterwards.
async fn accessible(browser: &Browser, what: &str) {
    let unlabelled = unlabelled_controls(browser).await;
    assert!(
        unlabelled.is_empty(),
        "{what}: controls without a label: {unlabelled:?}"
    );
    browser
        .execute("document.body.style.zoom = '2';", vec![])
        .await
        .unwrap();
    let (zoomed, zoomed_out) = sideways_overflow(browser).await;
    browser
        .execute("document.body.style.zoom = '';", vec![])
        .await
        .unwrap();
    assert!(
        zoomed <= 0,
        "{what}: {zoomed} CSS px to scroll sideways at 200 % zoom: {zoomed_out:?}"
    );
    browser.set_window_size(420, 900).await.unwrap();
    let (narrow, narrow_out) = sideways_overflow(browser).await;
    browser.set_window_size(1280, 1100).await.unwrap();
    assert!(
        narrow <= 0,
        "{what}: {narrow} px to scroll sideways in a 420 px window: {narrow_out:?}"
    );
}

/// The issue's accessibility rules in a real browser, page by page: every control has a label;
/// FENCED and ADVISORY are words and an icon, never a colour alone; the pages reflow at 200 %
/// zoom and in a narrow window; and the two-person release is done with the keyboard alone
/// (Tab, typing and Enter: the request, then the approval with the kind typed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_labelled_keyboard_operable_and_reflows_in_chromium() {
    let cluster = DevCluster::start().await.unwrap();
    cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .unwrap();
    let carol = admin_client(&cluster, "carol", "picket-admin");
    for (name, prefix, fenced) in [("ledger", "ledger/", true), ("cache", "cache/", false)] {
        let class = proto::ClassSpec {
            prefix: prefix.into(),
            fenced,
            ..common::owned_class(name, 30_000, 1, "https://runbooks.example.invalid/ledger")
        };
        common::put_class(&carol, NS, class).await;
    }
    let stuck = service(&cluster, "ledger-writer").await;
    let held = stuck.lock(NS, KEY).await.unwrap();
    // Its own session: the fenced release below revokes `stuck`'s.
    let cacher = service(&cluster, "cache-writer").await;
    let _cached = cacher.lock(NS, "cache/7").await.unwrap();
    // Another session: cache/7's release (revocation on by default) ends `cacher`'s.
    let cacher_8 = service(&cluster, "cache-writer-8").await;
    let _cached_too = cacher_8.lock(NS, "cache/8").await.unwrap();
    let waiter = service(&cluster, "ledger-writer-2").await;
    let next = tokio::spawn(async move {
        let guard = waiter.lock(NS, KEY).await.unwrap();
        (guard, waiter)
    });
    common::until_queue(&carol, NS, KEY, 1).await;

    let profiles = tempfile::tempdir().unwrap();
    let driver = Driver::start(profiles.path().to_owned()).await;
    let base = cluster.http_endpoint(0);
    let alice = driver.browser("alice").await;
    alice.goto(&format!("{base}/console/")).await.unwrap();
    text_of(&alice, "#principal").await;
    accessible(&alice, "the dev sign-in").await;
    sign_in_with(&alice, "alice", &["picket-operator", "picket-admin"]).await;
    until_text(&alice, "Overview", "the overview").await;
    accessible(&alice, "the overview").await;
    alice
        .goto(&format!("{base}/console/keys/{NS}/cache/7"))
        .await
        .unwrap();
    let banner = text_of(&alice, "main").await;
    assert!(banner.contains("⚠ ADVISORY"), "{banner}");
    accessible(&alice, "an advisory key").await;
    for (path, what) in [
        ("/console/audit".to_owned(), "the audit"),
        ("/console/classes".to_owned(), "the classes"),
        (
            "/console/classes/edit?namespace=orders&prefix=ledger%2F".to_owned(),
            "a class's form",
        ),
    ] {
        alice.goto(&format!("{base}{path}")).await.unwrap();
        text_of(&alice, "main").await;
        accessible(&alice, what).await;
    }

    // Alice requests with the keyboard alone: from the top of the key page, Tab to the reason,
    // type it, Tab on to the button (passing every control of the form) and press Enter.
    alice
        .goto(&format!("{base}/console/keys/{NS}/{KEY}"))
        .await
        .unwrap();
    let banner = text_of(&alice, "main").await;
    assert!(banner.contains("◆ FENCED"), "{banner}");
    accessible(&alice, "a fenced key").await;
    let before = tab_to(&alice, "#reason").await;
    assert!(before.contains(&"input#token".to_owned()), "{before:?}");
    type_text(&alice, "writer wedged, by keyboard").await;
    let after = tab_to(&alice, "#request-form button[type=submit]").await;
    assert_eq!(
        after,
        ["input#incident", "input#revoke"],
        "the form's controls in order"
    );
    press(&alice, Key::Enter).await;
    until_text(&alice, "You made this request", "the approval page").await;
    let request = alice.current_url().await.unwrap().path().to_owned();
    accessible(&alice, "the requester's approval page").await;

    // Dana approves with the keyboard alone on another replica.
    let dana = driver.browser("dana").await;
    dana.goto(&format!("{}{request}", cluster.http_endpoint(1)))
        .await
        .unwrap();
    sign_in_with(&dana, "dana", &["picket-incident-commander"]).await;
    until_text(&dana, "Type the class's kind", "the approval form").await;
    accessible(&dana, "the approval page").await;
    tab_to(&dana, "#kind").await;
    type_text(&dana, "fenced").await;
    tab_to(&dana, "#approve-form button[type=submit]").await;
    press(&dana, Key::Enter).await;
    until_text(&dana, "approved", "the outcome").await;
    let (guard, _waiter) = next.await.unwrap();
    assert!(guard.token() > held.token(), "the waiter holds the key now");
    click(&dana, "a[href^='/console/verify/']").await;
    until_text(
        &dana,
        "When the old holder's client learned its loss",
        "the verify page",
    )
    .await;
    accessible(&dana, "the verify page").await;

    // The advisory path, by keyboard too: the checklist's radio groups are answered with Space
    // and the arrow keys, and its answers are recorded with the request's reason.
    alice
        .goto(&format!("{base}/console/keys/{NS}/cache/7"))
        .await
        .unwrap();
    until_text(&alice, "Advisory checklist", "the advisory form").await;
    tab_to(&alice, "#stopped-yes").await;
    press(&alice, Key::Space).await;
    tab_to(&alice, "input[name=double_run]").await;
    press(&alice, Key::Right).await;
    let answers = alice
        .execute(
            "return [document.querySelector('#stopped-yes').checked, document.querySelector('#double-no').checked];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(answers, json!([true, true]), "the checklist by keyboard");
    tab_to(&alice, "#reason").await;
    type_text(&alice, "cache writer wedged").await;
    tab_to(&alice, "#request-form button[type=submit]").await;
    press(&alice, Key::Enter).await;
    until_text(
        &alice,
        "You made this request",
        "the advisory approval page",
    )
    .await;
    let request = alice.current_url().await.unwrap().path().to_owned();
    dana.goto(&format!("{}{request}", cluster.http_endpoint(1)))
        .await
        .unwrap();
    until_text(&dana, "Type the class's kind", "the advisory approval form").await;
    tab_to(&dana, "#kind").await;
    type_text(&dana, "advisory").await;
    tab_to(&dana, "#approve-form button[type=submit]").await;
    press(&dana, Key::Enter).await;
    until_text(&dana, "approved", "the advisory outcome").await;
    let audit = carol
        .query_audit(proto::QueryAuditRequest {
            namespace: Some(NS.into()),
            key: Some("cache/7".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let approved = audit
        .records
        .iter()
        .find(|r| r.action == proto::AuditAction::ForceReleaseApproved as i32)
        .expect("the advisory approval is audited");
    assert_eq!(approved.reason, "cache writer wedged", "{approved:?}");
    let answers = approved
        .checklist
        .clone()
        .expect("the checklist is audited");
    assert_eq!(
        (answers.holder_stopped, answers.double_run_acceptable),
        (
            proto::ChecklistAnswer::Yes as i32,
            proto::ChecklistAnswer::No as i32
        ),
        "{approved:?}"
    );
    assert_eq!(
        approved
            .holder
            .as_ref()
            .map(|h| (h.name.as_str(), h.host.as_str())),
        Some(("cache-writer", "worker-7")),
        "the released holder's identity is audited: {approved:?}"
    );
    assert_eq!(approved.fenced, Some(false), "{approved:?}");

    // The unsafe advisory case (docs/locks.md, "The advisory rule"): the holder may still run
    // and a double run is not acceptable. The request needs a statement; a second operator
    // cannot approve it, an incident commander can.
    alice
        .goto(&format!("{base}/console/keys/{NS}/cache/8"))
        .await
        .unwrap();
    until_text(&alice, "Advisory checklist", "the advisory form").await;
    click(&alice, "#stopped-unknown").await;
    click(&alice, "#double-no").await;
    fill(&alice, "#reason", "cache writer 8 wedged, host unreachable").await;
    click(&alice, "#request-form button[type=submit]").await;
    until_text(
        &alice,
        "Refused (rule advisory_statement_required)",
        "the refusal without a statement",
    )
    .await;
    fill(
        &alice,
        "#statement",
        "cache entries are rebuilt idempotently; INC-77 accepts a rerun",
    )
    .await;
    click(&alice, "#request-form button[type=submit]").await;
    until_text(&alice, "You made this request", "the approval page").await;
    let unsafe_request = alice.current_url().await.unwrap().path().to_owned();
    let erin = driver.browser("erin").await;
    erin.goto(&format!("{}{unsafe_request}", cluster.http_endpoint(2)))
        .await
        .unwrap();
    sign_in_with(&erin, "erin", &["picket-operator"]).await;
    until_text(&erin, "Only an incident commander", "the unsafe warning").await;
    let answers_first = erin
        .execute(
            "const a = document.querySelector('#answers'), r = document.querySelector('#asked-h'); \
             return !!(a.compareDocumentPosition(r) & Node.DOCUMENT_POSITION_FOLLOWING);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        answers_first,
        json!(true),
        "the answers come before the request"
    );
    shot(&erin, "d1-unsafe-advisory").await;
    fill(&erin, "#kind", "advisory").await;
    click(&erin, "#approve-form button[type=submit]").await;
    until_text(
        &erin,
        "Refused (rule incident_commander_required)",
        "an operator's refusal",
    )
    .await;
    dana.goto(&format!("{}{unsafe_request}", cluster.http_endpoint(1)))
        .await
        .unwrap();
    until_text(&dana, "Type the class's kind", "the unsafe approval form").await;
    fill(&dana, "#kind", "advisory").await;
    click(&dana, "#approve-form button[type=submit]").await;
    until_text(
        &dana,
        "Nothing refuses the old holder",
        "the advisory outcome",
    )
    .await;
    let outcome = text_of(&dana, "main").await;
    assert!(
        !outcome.contains("refused by the fencing resource"),
        "no fencing claim for an advisory lock: {outcome}"
    );
    erin.close().await.unwrap();

    alice.close().await.unwrap();
    dana.close().await.unwrap();
    drop(driver);
}
