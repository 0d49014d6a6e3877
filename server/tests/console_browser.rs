//! The console in a real browser: Debian's headless Chromium, driven through chromedriver
//! (WebDriver), against a 3-replica dev cluster. Two people in two browsers walk the on-call
//! journey: the alert's link, sign-in, the key page with its FENCED banner, the request, the
//! requester not offered the approval, the second person's approval with the kind typed, the
//! first person's key page following the hand-off live (no reload), and the second person's
//! verify page: the old holder told of its loss, the queue draining live.
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

use fantoccini::{Client as Browser, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use picket_net::client::{Client, ClientConfig, Credentials, Session};
use picket_net::proto;
use picket_server::dev::{free_port, DevCluster};
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

/// Waits until `key` has `depth` waiters.
async fn until_queue(admin: &Client, depth: u64) {
    for _ in 0..200 {
        let info = admin
            .inspect(proto::InspectRequest {
                namespace: NS.into(),
                key: KEY.into(),
                allow_stale: false,
            })
            .await
            .unwrap();
        if info.queue_depth == depth {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{KEY} never had {depth} waiting");
}

async fn sign_in(browser: &Browser, principal: &str) {
    let url = browser.current_url().await.unwrap();
    assert!(url.path().ends_with("/console/signin"), "{url}");
    assert!(text_of(browser, "body")
        .await
        .contains("INSECURE DEV SIGN-IN"));
    fill(browser, "#principal", principal).await;
    click(browser, "form button[type=submit]").await;
}

async fn service(cluster: &DevCluster, name: &str) -> Session {
    let mut config = ClientConfig::new(cluster.client_endpoints(), name);
    config.identity_host = "worker-7".to_owned();
    config.session_ttl = Some(Duration::from_secs(10));
    Client::new(config).unwrap().create_session().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_people_walk_the_journey_in_chromium() {
    let cluster = DevCluster::start().await.unwrap();
    cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .unwrap();
    let mut admin = ClientConfig::new(cluster.client_endpoints(), "console-test");
    admin.credentials = Credentials {
        principal: Some("carol".into()),
        roles: Some("picket-admin".into()),
        bearer: None,
    };
    let admin = Client::new(admin).unwrap();
    admin
        .put_class(proto::PutClassRequest {
            namespace: NS.into(),
            class: Some(proto::ClassSpec {
                name: "ledger".into(),
                prefix: "ledger/".into(),
                fenced: true,
                session_ttl_ms_default: 10_000,
                session_ttl_ms_max: 30_000,
                hold_ms_max_expected: 1,
                owner: "team-ledger".into(),
                runbook_url: String::new(),
                description: "ledger writes".into(),
            }),
        })
        .await
        .unwrap();
    let stuck = service(&cluster, "ledger-writer").await;
    let held = stuck.lock(NS, KEY).await.unwrap();
    let waiter = service(&cluster, "ledger-writer-2").await;
    let next = tokio::spawn(async move {
        let guard = waiter.lock(NS, KEY).await.unwrap();
        (guard, waiter)
    });
    // A second waiter behind the first, so that the verify page sees the queue drain.
    until_queue(&admin, 1).await;
    let third = service(&cluster, "ledger-writer-3").await;
    let last = tokio::spawn(async move {
        let guard = third.lock(NS, KEY).await.unwrap();
        (guard, third)
    });
    until_queue(&admin, 2).await;

    let profiles = tempfile::tempdir().unwrap();
    let driver = Driver::start(profiles.path().to_owned()).await;
    let alice = driver.browser("alice").await;
    let bob = driver.browser("bob").await;

    // Alice follows the alert's console link (the metric's console_url: key as one segment).
    let base = cluster.http_endpoint(0);
    alice
        .goto(&format!("{base}/console/keys/{NS}/ledger%2F17"))
        .await
        .unwrap();
    shot(&alice, "1-sign-in").await;
    sign_in(&alice, "alice").await;
    until_text(
        &alice,
        "ledger-writer on worker-7",
        "the key page after sign-in",
    )
    .await;
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

    // Judge and request: the token is pre-filled, revocation is on.
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

    // Bob opens the link Alice sent him (on another replica), signs in and approves.
    let approval_path = approval.path().to_owned();
    bob.goto(&format!("{}{approval_path}", cluster.http_endpoint(1)))
        .await
        .unwrap();
    sign_in(&bob, "bob").await;
    until_text(&bob, "The key now", "the approval page").await;
    let compare = text_of(&bob, ".compare").await;
    assert!(
        compare.contains("writer wedged since the deploy [incident INC-7]"),
        "{compare}"
    );
    assert!(compare.contains("alice (on-call)"), "{compare}");
    shot(&bob, "4-approval").await;
    fill(&bob, "#kind", "advisory").await;
    click(&bob, "#approve-form button[type=submit]").await;
    until_text(&bob, "fenced_not_acknowledged", "the refusal in words").await;
    shot(&bob, "5-refused").await;
    fill(&bob, "#kind", "fenced").await;
    click(&bob, "#approve-form button[type=submit]").await;
    until_text(&bob, "approved", "the outcome").await;
    let outcome = text_of(&bob, "main").await;
    assert!(
        outcome.contains("was revoked in the same revision"),
        "{outcome}"
    );
    shot(&bob, "6-approved").await;

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

    // Bob verifies from the outcome: the release in the lock log, the queue, the old holder.
    click(&bob, "a[href^='/console/verify/']").await;
    until_text(
        &bob,
        "When the old holder's client learned its loss",
        "the verify page",
    )
    .await;
    let release = text_of(&bob, "#release").await;
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
    assert!(text_of(&bob, "#alert-state")
        .await
        .contains("no Alertmanager is configured"));
    // The revoked session's client was pushed its end (the page polls for it).
    until_text(
        &bob,
        "pushed on its session stream",
        "when the holder learned it",
    )
    .await;
    let told = text_of(&bob, "#told-state").await;
    assert!(told.starts_with("✔ Told"), "{told}");
    assert_eq!(
        column(&bob, "#queue-table td.depth").await,
        ["0", "1", "2", "1", "1"]
    );
    bob.execute("window.picketMark = 'no reload';", vec![])
        .await
        .unwrap();
    until_text(
        &bob,
        "Live: following the lock log",
        "the verify page's live stream",
    )
    .await;
    shot(&bob, "8-verify").await;

    // The queue drains, live: the first waiter lets go, the second holds, nobody waits.
    drop(next_guard);
    let (last_guard, _third) = tokio::time::timeout(Duration::from_secs(15), last)
        .await
        .expect("the second waiter is granted")
        .unwrap();
    until_text(&bob, "ledger-writer-3 on worker-7", "the drained queue").await;
    assert!(text_of(&bob, "#held-now").await.ends_with("; 0 waiting"));
    assert_eq!(
        column(&bob, "#queue-table td.depth").await,
        ["0", "1", "2", "1", "0", "0"]
    );
    let mark = bob
        .execute("return window.picketMark;", vec![])
        .await
        .unwrap();
    assert_eq!(mark, json!("no reload"), "the page was not reloaded");
    bob.execute(
        "document.getElementById('queue-h').scrollIntoView();",
        vec![],
    )
    .await
    .unwrap();
    shot(&bob, "9-verify-drained").await;
    drop(last_guard);

    alice.close().await.unwrap();
    bob.close().await.unwrap();
    drop(driver);
    drop(held);
    cluster.shutdown().await;
}

/// The OpenID Connect sign-in in Chromium, at the real test provider (`tests/console_oidc.rs`
/// walks its refusals): a signed-out key page leads to the provider's login form and, after it,
/// back to that page signed in, so the callback's page moved on by itself and the browser sent
/// the new `SameSite=Strict` cookie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_at_the_openid_provider_in_chromium() {
    let provider = common::oidc_provider::Provider::start().await;
    let (cluster, _secret) = common::oidc_provider::cluster_for(&provider).await;
    let profiles = tempfile::tempdir().unwrap();
    let driver = Driver::start(profiles.path().to_owned()).await;
    let alice = driver.browser("alice-oidc").await;
    let page = format!("/console/keys/{NS}/{KEY}");
    alice
        .goto(&format!("{}{page}", cluster.http[0]))
        .await
        .unwrap();
    until_text(&alice, "Sign in", "the provider's login form").await;
    let url = alice.current_url().await.unwrap();
    assert!(url.as_str().starts_with(&provider.issuer), "{url}");
    fill(&alice, "input[name=login]", "alice").await;
    fill(&alice, "input[name=password]", "alice-pw").await;
    shot(&alice, "oidc-1-provider-login").await;
    click(&alice, "button[type=submit]").await;
    until_text(
        &alice,
        "Signed in as alice (picket-operator)",
        "back at the key page, signed in",
    )
    .await;
    assert_eq!(alice.current_url().await.unwrap().path(), page);
    shot(&alice, "oidc-2-signed-in").await;
    alice.close().await.unwrap();
    drop(driver);
}
