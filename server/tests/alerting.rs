//! The page end to end (issue 16): three real `picketd` (`tests/common`, OIDC on), a real
//! Prometheus scraping them with the shipped rules (`deploy/prometheus/picket-alerts.yml`) and a
//! real Alertmanager posting to a webhook receiver run by this test.
//!
//! In one namespace an older hold of a class without a threshold (a nightly batch job) and a
//! younger fenced hold stuck past its class's max expected hold with a waiter queued: the younger
//! one arrives at the webhook as `PicketHoldAboveClassMax` with namespace, key, class, fenced
//! flag, owner, links, the threshold and the queue depth; the test follows the links (the key's
//! inspection JSON and the rendered runbook with the namespace and key filled in, from the
//! replica the links name, whichever replica leads). A second stuck lock of the class pages while
//! the first is still stuck, and `Admin.LongestHolds` (the console overview's source) lists both.
//! A two-person force-release resolves the first alert at the webhook. Then every replica stops,
//! and `PicketClusterDown` fires.
//!
//! Prometheus and Alertmanager come from Debian (`prometheus`, `prometheus-alertmanager`;
//! scripts/test installs them). They run on 127.0.0.1 with their data in a temporary directory,
//! with 1 s scrape and evaluation intervals and the rules' `for:` shortened to 2 s in the test's
//! copy (the rules are otherwise the shipped file). Every process is stopped by PID when the test
//! ends, failed or not (`common::alerts::Process`, `OidcCluster`'s drop).
// Real processes and sockets: not under the simulator.
#![cfg(not(madsim))]

mod common;

use std::time::Duration;

use common::alerts::{start_alertmanager, start_prometheus, wait_ready, STEP};
use common::*;
use picket_client::{Client, ClientConfig};
use serde_json::Value;

const NS: &str = "orders";
const KEY: &str = "invoice/42";
const SECOND_KEY: &str = "invoice/43";
const NIGHTLY_KEY: &str = "nightly/run";

/// The webhook receiver: every notification Alertmanager posts, as JSON.
struct Webhook {
    url: String,
    notifications: tokio::sync::mpsc::UnboundedReceiver<Value>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn webhook() -> Webhook {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/alerts", listener.local_addr().unwrap());
    let (tx, notifications) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/alerts",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(body);
                "ok"
            }
        }),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
            .unwrap();
    });
    Webhook {
        url,
        notifications,
        _stop: stop,
    }
}

impl Webhook {
    /// Drops the notifications received so far.
    fn drain(&mut self) {
        while self.notifications.try_recv().is_ok() {}
    }

    /// Waits for a notification carrying an alert named `name` with status `status` (`firing`
    /// or `resolved`) and answers that alert; the notifications before it are dropped.
    async fn alert(&mut self, name: &str, status: &str, logs: &dyn Fn() -> String) -> Value {
        self.alert_for(name, status, None, logs).await
    }

    /// [`Self::alert`] of the key `key` only, when given.
    async fn alert_for(
        &mut self,
        name: &str,
        status: &str,
        key: Option<&str>,
        logs: &dyn Fn() -> String,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + STEP;
        let mut seen = Vec::new();
        loop {
            let notification =
                match tokio::time::timeout_at(deadline, self.notifications.recv()).await {
                    Ok(Some(notification)) => notification,
                    _ => panic!(
                        "no {status} {name} at the webhook within {STEP:?}; got {seen:#?}\n{}",
                        logs()
                    ),
                };
            let alerts = notification["alerts"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if let Some(alert) = alerts.into_iter().find(|a| {
                a["labels"]["alertname"] == name
                    && a["status"] == status
                    && key.is_none_or(|key| a["labels"]["key"] == key)
            }) {
                return alert;
            }
            seen.push(notification);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_lock_pages_with_working_links_resolves_on_force_release_and_a_down_cluster_pages()
{
    let mut cluster = OidcCluster::start();
    let dir = tempfile::Builder::new()
        .prefix("picket-alerting-")
        .tempdir()
        .unwrap();
    let mut hook = webhook().await;
    let (alertmanager, am_address) = start_alertmanager(dir.path(), Some(&hook.url));
    wait_ready(&alertmanager, &format!("http://{am_address}")).await;
    cluster.leader(STEP).await;
    let (prometheus, prometheus_url) = start_prometheus(dir.path(), &cluster.http, &am_address);
    wait_ready(&prometheus, &prometheus_url).await;

    // A fenced class with a 2 s max expected hold and an owner (no runbook of its own: the
    // alert links Picket's) on `invoice/`, and a batch class without a threshold on `nightly/`.
    let carol = cluster.token("carol", &["picket-admin"]);
    let mut class = class_put_args(NS, "ledger");
    class.extend(["--prefix", "invoice/", "--fenced"]);
    class.extend(["--hold-ms-max-expected", "2000", "--owner", "team-ledger"]);
    cluster.picketctl(Some(&carol), &class).await.ok();
    let mut batch = class_put_args(NS, "batch");
    batch.extend(["--prefix", "nightly/"]);
    cluster.picketctl(Some(&carol), &batch).await.ok();
    let session_of = |name: &str| {
        let mut config = ClientConfig::new(cluster.endpoints.clone(), name);
        config.session_ttl = Some(Duration::from_secs(3));
        config.credentials = bearer(cluster.token(&format!("svc-{name}"), &["picket-client"]));
        Client::new(config).unwrap()
    };
    // The nightly job's hold is the namespace's oldest, legitimately long; then the ledger
    // writer's hold, which renews and never releases, with a waiter queued behind it.
    let nightly = session_of("nightly-job").create_session().await.unwrap();
    let _nightly_guard = nightly.lock(NS, NIGHTLY_KEY).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let session = session_of("ledger-writer").create_session().await.unwrap();
    let guard = session.lock(NS, KEY).await.unwrap();
    let token = guard.token();
    let waiter = session_of("ledger-waiter").create_session().await.unwrap();
    let queued = tokio::spawn(async move {
        // Granted after the force-release below, and released at once.
        let granted = waiter.lock(NS, KEY).await;
        drop(granted);
        waiter
    });

    let logs = || {
        format!(
            "{}{}{}",
            prometheus.log_tail(),
            alertmanager.log_tail(),
            cluster.logs()
        )
    };
    let page = hook
        .alert_for("PicketHoldAboveClassMax", "firing", Some(KEY), &logs)
        .await;
    let labels = &page["labels"];
    assert_eq!(labels["namespace"], NS, "{page}");
    assert_eq!(labels["key"], KEY, "{page}");
    assert_eq!(labels["class"], "ledger", "{page}");
    assert_eq!(labels["fenced"], "true", "{page}");
    assert_eq!(labels["owner"], "team-ledger", "{page}");
    assert_eq!(labels["severity"], "page", "{page}");
    let summary = page["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("max expected hold of 2s") && summary.ends_with("; 1 waiting"),
        "the summary names the threshold and the queue depth: {page}"
    );
    let description = page["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains("1 waiter(s) are queued behind it"),
        "{page}"
    );
    // The links start with the cluster's external URL (by default member 1's HTTP address),
    // whichever replica leads.
    let external = &cluster.http[0].clone();
    let inspect_url = page["annotations"]["inspect_url"].as_str().unwrap();
    assert_eq!(
        inspect_url,
        format!("{external}/v1/namespaces/{NS}/locks/invoice%2F42"),
        "{page}"
    );
    let console_url = page["annotations"]["console_url"].as_str().unwrap();
    assert_eq!(
        console_url,
        format!("{external}/console/keys/{NS}/invoice%2F42"),
        "{page}"
    );
    let runbook_url = page["annotations"]["runbook_url"].as_str().unwrap();
    assert_eq!(
        runbook_url,
        format!("{external}/runbooks/stuck-lock.md?namespace={NS}&key=invoice%2F42"),
        "{page}"
    );
    assert_eq!(
        page["annotations"]["inspect_command"],
        format!("picketctl inspect {NS} '{KEY}'"),
        "{page}"
    );

    // The console link lands on the key's page (here, first its sign-in, which comes back to it).
    let console = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(console_url)
        .send()
        .await
        .unwrap();
    assert_eq!(console.status(), 303, "{console_url}");
    assert_eq!(
        console.headers()["location"],
        format!("/console/signin?next=/console/keys/{NS}/{KEY}").as_str(),
        "{console_url}"
    );

    // Follow the links, as the paged engineer does (inspection needs a token with OIDC on).
    let alice = alice_token(&cluster);
    let (status, body) = get_as(inspect_url, Some(&alice)).await.unwrap();
    assert_eq!(status, 200, "{inspect_url}: {body}");
    let inspection: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(inspection["stale"], false, "{inspection}");
    assert_eq!(inspection["key"], KEY, "{inspection}");
    assert_eq!(inspection["holder"]["token"], token.0, "{inspection}");
    assert_eq!(
        inspection["holder"]["identity"]["name"], "ledger-writer",
        "{inspection}"
    );
    assert_eq!(inspection["class"]["fenced"], true, "{inspection}");
    assert_eq!(inspection["class"]["owner"], "team-ledger", "{inspection}");
    let (status, runbook) = get(runbook_url).await.unwrap();
    assert_eq!(status, 200, "{runbook_url}: {runbook}");
    assert!(runbook.contains("PicketHoldAboveClassMax"), "{runbook}");
    assert!(
        runbook.starts_with("<!doctype html>") && !runbook.contains("$namespace"),
        "the runbook is served rendered, the namespace filled in: {runbook}"
    );
    assert!(
        runbook.contains(&format!("<mark>{NS}</mark>"))
            && runbook.contains(&format!("<mark>{KEY}</mark>")),
        "{runbook}"
    );

    // A second stuck lock of the class pages while the first is still stuck.
    let second = session_of("ledger-second").create_session().await.unwrap();
    let second_guard = second.lock(NS, SECOND_KEY).await.unwrap();
    let second_page = hook
        .alert_for("PicketHoldAboveClassMax", "firing", Some(SECOND_KEY), &logs)
        .await;
    assert_eq!(second_page["labels"]["class"], "ledger", "{second_page}");
    let admin = Client::new({
        let mut config = ClientConfig::new(cluster.endpoints.clone(), "on-call");
        config.credentials = bearer(alice_token(&cluster));
        config
    })
    .unwrap();
    let longest = admin
        .longest_holds(picket_proto::proto::LongestHoldsRequest { allow_stale: false })
        .await
        .unwrap();
    let overdue: Vec<&str> = longest.overdue.iter().map(|h| h.key.as_str()).collect();
    assert_eq!(
        overdue,
        [KEY, SECOND_KEY],
        "both stuck holds listed, furthest over first; the nightly hold (no threshold) is not: {longest:?}"
    );
    assert_eq!(
        longest
            .holds
            .iter()
            .map(|h| h.key.as_str())
            .collect::<Vec<_>>(),
        [NIGHTLY_KEY],
        "the namespace's oldest hold is the nightly job's: {longest:?}"
    );

    // The two-person force-release: the alert resolves at the webhook.
    let bob = cluster.token("bob", &["picket-operator"]);
    let token_arg = token.0.to_string();
    let requested = cluster
        .picketctl(
            Some(&alice),
            &force_release_args(
                NS,
                KEY,
                &token_arg,
                "paged: holder stuck",
                &["--revoke-session"],
            ),
        )
        .await
        .ok();
    let id = requested["force_release_id"].as_u64().unwrap().to_string();
    let approved = cluster.approve(&bob, &id, "fenced").await;
    assert_eq!(approved["released_token"], token.0, "{approved}");
    let resolved = hook
        .alert_for("PicketHoldAboveClassMax", "resolved", Some(KEY), &logs)
        .await;
    assert_eq!(resolved["labels"]["key"], KEY, "{resolved}");
    drop(guard);
    drop(second_guard);
    let waiter = tokio::time::timeout(STEP, queued).await.unwrap().unwrap();
    drop(waiter);

    // Every replica stops: the whole-cluster alert fires, its runbook on the external URL.
    let logs = || format!("{}{}", prometheus.log_tail(), alertmanager.log_tail());
    hook.drain();
    for i in 0..3 {
        cluster.stop(i);
    }
    let down = hook.alert("PicketClusterDown", "firing", &logs).await;
    assert_eq!(down["labels"]["severity"], "page", "{down}");
    assert_eq!(
        down["annotations"]["runbook_url"],
        format!("{external}/runbooks/cluster-down.md"),
        "{down}"
    );
}

fn alice_token(cluster: &OidcCluster) -> String {
    cluster.token("alice", &["picket-operator"])
}
