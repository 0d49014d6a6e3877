//! The rolling upgrade of docs/upgrades.md (issue 38) against real processes: three replicas
//! of the previous release (release/previous, built by scripts/build-previous) serve client
//! load; each is replaced by this build's `picketd` in turn (SIGTERM, swap the binary, start it
//! on the same data directory and file), one is rolled back to the previous release and
//! upgraded again before the last one goes, and the cluster ends on this release.
//!
//! Under load the whole time: several sessions of the client library take and release a fenced
//! key (and a few others) and write to a fenced resource ([`Resource`]) that admits a token only
//! through a [`FencingGate`] and records every acknowledged grant. Asserted: no grant refused
//! or given to two holders at once, tokens strictly rising per key at the resource, every grant
//! still acknowledged as released and in the replicated lock log read back at the end, the next
//! grant of every key above every token the resource saw (nothing acknowledged was lost), every
//! session alive at the end with the id it started with after outliving its TTL, no client
//! error but the retries of a leader change, each restarted replica recovered
//! its data directory cleanly (never "durable state lost": a release taking the other's files
//! for damage) and caught up, and the cluster serves at the end. What each member says about
//! its release and the cluster version is checked by [`assert_versions`].

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use picket_client::FencingGate;
use picket_client::{Client, ClientConfig, ClientError, Session, SessionEvent};
use picket_core::locks::Token;
use picket_proto::proto;
use serde_json::Value;
use support::{json_of, picketctl_binary, Cluster};

/// The cluster version of a log written by the previous release (0.1.0 has none: 1).
const CLUSTER_VERSION_PREVIOUS: u64 = 1;
/// The highest cluster version this build supports, which the leader steps to once every
/// member supports it.
const CLUSTER_VERSION_CURRENT: u64 = 2;

const NS: &str = "orders";
/// The key every worker contends for, in a fenced class (`ledger/`).
const FENCED_KEY: &str = "ledger/main";
const WORKERS: usize = 4;
/// The workers' sessions' TTL: the test outlives it ([`Load::outlive_ttl`]).
const SESSION_TTL: Duration = Duration::from_secs(10);
/// Lock operations the workers must complete after each step: the cluster serves.
const PROGRESS_PER_STEP: u64 = 100;

/// One release's `picketd`.
#[derive(Clone, Debug)]
struct Build {
    picketd: PathBuf,
    /// As `picketd -V` says it: `0.1.0`, `0.2.0`.
    version: String,
}

/// This build's `picketd`, and the previous release's (`$PICKET_PREVIOUS_BIN_DIR`, or
/// `<target>/previous-release/` beside this build's `<target>/debug/picketd`); fails, naming
/// scripts/build-previous, when the previous one is missing or is not release/previous.
fn builds() -> (Build, Build) {
    let current = PathBuf::from(env!("CARGO_BIN_EXE_picketd"));
    let release =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../release/previous"))
            .unwrap();
    let field = |name: &str| {
        release
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("release/previous has no `{name} = `"))
            .trim()
            .to_owned()
    };
    let (version, commit) = (field("version"), field("commit"));
    let dir = match std::env::var_os("PICKET_PREVIOUS_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => current
            .parent()
            .and_then(Path::parent)
            .expect("<target>/debug/picketd")
            .join("previous-release"),
    };
    let build_it = format!(
        "run scripts/build-previous first: it builds release/previous ({version}, {commit}) into \
         $CARGO_TARGET_DIR/previous-release (or set PICKET_PREVIOUS_BIN_DIR)"
    );
    let picketd = dir.join("picketd");
    assert!(
        picketd.is_file(),
        "the previous release's picketd is not at {}: {build_it}",
        picketd.display()
    );
    if let Ok(stamp) = std::fs::read_to_string(dir.join("built-from")) {
        assert_eq!(
            stamp.trim(),
            commit,
            "{} was built from another commit: {build_it}",
            picketd.display()
        );
    }
    let previous = Build {
        version: version_of(&picketd),
        picketd,
    };
    assert_eq!(previous.version, version, "{previous:?}: {build_it}");
    let current = Build {
        version: version_of(&current),
        picketd: current,
    };
    assert_eq!(current.version, env!("CARGO_PKG_VERSION"), "{current:?}");
    assert_ne!(
        previous.version, current.version,
        "an upgrade changes the release"
    );
    (previous, current)
}

/// `picketd -V`'s release: `picketd 0.2.0 (c1497f12cd67)` -> `0.2.0`.
fn version_of(picketd: &Path) -> String {
    let out = Command::new(picketd).arg("-V").output().unwrap();
    assert!(out.status.success(), "{} -V: {out:?}", picketd.display());
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("{} -V said {text:?}", picketd.display()))
        .to_owned()
}

/// The protected resource: admits a write only through a [`FencingGate`] (a token below the
/// highest it accepted for the key is refused), and records every acknowledged grant in the
/// order it saw them. Also checks what the gate alone cannot: one writer per key at a time, and
/// each grant's token strictly above the last grant's (a repeated token is a second grant).
#[derive(Default)]
struct Resource {
    gate: Option<FencingGate>,
    /// key -> the (session, token) writing now.
    writing: BTreeMap<String, (u64, u64)>,
    /// Every grant the resource admitted: (key, token, session, step).
    grants: Vec<(String, u64, u64, String)>,
}

impl Resource {
    fn write(&mut self, key: &str, token: u64, session: u64, step: &str) -> Result<(), String> {
        let gate = self.gate.get_or_insert_with(|| FencingGate::new(1_000));
        if let Some((other, other_token)) = self.writing.get(key) {
            return Err(format!(
                "{key}: granted to session {session} (token {token}) while session {other} \
                 (token {other_token}) still holds it ({step})"
            ));
        }
        let last = self.grants.iter().rev().find(|g| g.0 == key);
        if let Some((_, last_token, last_session, last_step)) = last {
            if token <= *last_token {
                return Err(format!(
                    "{key}: token {token} (session {session}, {step}) is not above the last \
                     grant's {last_token} (session {last_session}, {last_step})"
                ));
            }
        }
        gate.check(key, Token(token))
            .map_err(|e| format!("the resource refused session {session} ({step}): {e}"))?;
        self.writing.insert(key.to_owned(), (session, token));
        self.grants
            .push((key.to_owned(), token, session, step.to_owned()));
        Ok(())
    }

    /// The writer of `key` is done (called before it releases the lock).
    fn done(&mut self, key: &str, session: u64, token: u64) {
        let writing = self.writing.remove(key);
        assert_eq!(writing, Some((session, token)), "{key}");
    }

    fn highest(&self, key: &str) -> u64 {
        self.gate
            .as_ref()
            .and_then(|g| g.highest(key))
            .map_or(0, |t| t.0)
    }
}

/// What the workers share.
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    ops: AtomicU64,
    resource: Mutex<Resource>,
    /// The step of the test now (recorded with each grant).
    step: Mutex<String>,
    /// Errors the client library surfaced that a leader change explains, retried.
    retried: Mutex<Vec<String>>,
    /// Everything else that went wrong: a violation at the resource, a client error that is
    /// not a leader change's, a session lost. Empty at the end, or the test fails.
    problems: Mutex<Vec<String>>,
}

impl Shared {
    fn problem(&self, text: String) {
        eprintln!("PROBLEM: {text}");
        self.problems.lock().unwrap().push(text);
    }

    fn step(&self) -> String {
        self.step.lock().unwrap().clone()
    }

    /// Whether `error` is one a leader change explains (retried by the caller); anything else
    /// is recorded as a problem.
    fn retry(&self, worker: usize, what: &str, error: &ClientError) -> bool {
        let leader_change = match error {
            ClientError::Unavailable { .. } => true,
            ClientError::Refused { refusal, .. } => {
                matches!(refusal.rule.as_str(), "not_leader" | "not_ready")
            }
            _ => false,
        };
        let text = format!("worker {worker}: {what} ({}): {error}", self.step());
        if leader_change {
            eprintln!("retried: {text}");
            self.retried.lock().unwrap().push(text);
        } else {
            self.problem(text);
        }
        leader_change
    }
}

/// Client load: `WORKERS` sessions, each taking in turn the fenced key, another shared key and a
/// key of its own, writing to the [`Resource`] under each, and releasing.
struct Load {
    shared: Arc<Shared>,
    /// (session id at creation, the worker).
    workers: Vec<(u64, tokio::task::JoinHandle<Session>)>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
    /// When the last session was created.
    created: tokio::time::Instant,
}

impl Load {
    async fn start(cluster: &Cluster) -> Load {
        let shared = Arc::new(Shared::default());
        *shared.step.lock().unwrap() = "all previous".into();
        let mut workers = Vec::new();
        let mut watchers = Vec::new();
        for w in 0..WORKERS {
            let mut config = ClientConfig::new(cluster.endpoints.clone(), "upgrade-load");
            config.session_ttl = Some(SESSION_TTL);
            // A leader change costs about an election timeout; the budget only keeps a stuck
            // cluster from hanging the test.
            config.retry_budget = Duration::from_secs(30);
            let client = Client::new(config).unwrap();
            let session = client.create_session().await.unwrap();
            let id = session.id();
            watchers.push(tokio::spawn(watch_session(
                shared.clone(),
                w,
                session.clone(),
            )));
            workers.push((id, tokio::spawn(work(shared.clone(), w, session))));
        }
        Load {
            shared,
            workers,
            watchers,
            created: tokio::time::Instant::now(),
        }
    }

    /// Keeps the load going until every session lived longer than its TTL, so that one alive
    /// at the end was renewed by its keepalives (through every restart), not merely young.
    async fn outlive_ttl(&self) {
        let until = self.created + SESSION_TTL + Duration::from_millis(500);
        while tokio::time::Instant::now() < until {
            self.assert_no_problem("waiting out the session TTL");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn set_step(&self, step: &str) {
        eprintln!("== {step}");
        *self.shared.step.lock().unwrap() = step.to_owned();
    }

    fn assert_no_problem(&self, when: &str) {
        let problems = self.shared.problems.lock().unwrap();
        assert!(problems.is_empty(), "{when}: {problems:#?}");
    }

    /// Waits until the workers completed `more` lock operations beyond those done so far.
    async fn progress(&self, more: u64, what: &str) {
        let target = self.shared.ops.load(Ordering::Relaxed) + more;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while self.shared.ops.load(Ordering::Relaxed) < target {
            self.assert_no_problem(what);
            assert!(
                !self.workers.iter().any(|(_, w)| w.is_finished()),
                "a worker stopped ({what})"
            );
            assert!(
                tokio::time::Instant::now() < deadline,
                "no progress under load {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.assert_no_problem(what);
    }

    /// Stops the workers; their sessions, each still the one it started with.
    async fn stop(self) -> (Arc<Shared>, Vec<Session>) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let mut sessions = Vec::new();
        for (id, worker) in self.workers {
            let session = worker.await.unwrap();
            assert_eq!(session.id(), id);
            sessions.push(session);
        }
        for watcher in self.watchers {
            watcher.abort();
        }
        (self.shared, sessions)
    }
}

/// One worker: lock, write, release, until told to stop or something goes wrong.
async fn work(shared: Arc<Shared>, w: usize, session: Session) -> Session {
    let own = format!("jobs/w{w}");
    let keys = [FENCED_KEY, "ledger/b", FENCED_KEY, own.as_str()];
    let mut n = 0usize;
    while !shared.stop.load(Ordering::Relaxed) && shared.problems.lock().unwrap().is_empty() {
        let key = keys[n % keys.len()];
        n += 1;
        let guard = match session.lock(NS, key).await {
            Ok(guard) => guard,
            Err(error) => {
                if !shared.retry(w, &format!("lock {key}"), &error) {
                    break;
                }
                continue;
            }
        };
        let token = guard.token().0;
        let written =
            shared
                .resource
                .lock()
                .unwrap()
                .write(key, token, session.id(), &shared.step());
        if let Err(violation) = written {
            shared.problem(violation);
            break;
        }
        shared
            .resource
            .lock()
            .unwrap()
            .done(key, session.id(), token);
        if let Err(error) = guard.release().await {
            if !release_again(&shared, w, &session, key, token, error).await {
                break;
            }
        }
        shared.ops.fetch_add(1, Ordering::Relaxed);
    }
    session
}

/// A release the client library gave up on: asked again while the error is a leader change's.
async fn release_again(
    shared: &Shared,
    w: usize,
    session: &Session,
    key: &str,
    token: u64,
    mut error: ClientError,
) -> bool {
    loop {
        if !shared.retry(w, &format!("release {key} token {token}"), &error) {
            return false;
        }
        match session.release(NS, key, Token(token)).await {
            Ok(_) => return true,
            Err(again) => error = again,
        }
    }
}

/// Records as a problem every loss the session reports (itself, or one of its holds).
async fn watch_session(shared: Arc<Shared>, w: usize, session: Session) {
    let id = session.id();
    let mut events = session.events();
    drop(session);
    while let Some(event) = events.next().await {
        match event {
            SessionEvent::State(state) if state.is_healthy() => {}
            SessionEvent::State(picket_client::SessionState::Jeopardy { .. }) => {
                eprintln!("worker {w}: session {id} in jeopardy ({})", shared.step());
            }
            other => shared.problem(format!(
                "worker {w}: session {id}: {other:?} ({})",
                shared.step()
            )),
        }
    }
}

/// Which build each replica runs, by index.
type Running = [Build; 3];

/// Stops replica `i` (SIGTERM to its PID, a clean exit), starts `build` on the same data
/// directory and file, and waits until it serves and has caught up.
async fn restart_as(cluster: &mut Cluster, running: &mut Running, i: usize, build: &Build) {
    let before = support::status_of(&cluster.endpoints[i])
        .await
        .unwrap_or_else(|| panic!("node {} does not answer before its restart", i + 1));
    let exit = cluster.terminate(i);
    assert!(
        exit.success(),
        "node {} ({}) exited with {exit:?} on SIGTERM; its log:\n{}",
        i + 1,
        running[i].version,
        cluster.log(i)
    );
    let marker = format!(
        "\n=== upgrade test: node {} restarted as picketd {} ({})\n",
        i + 1,
        build.version,
        build.picketd.display()
    );
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(cluster.dir.path().join(format!("node-{}.log", i + 1)))
        .and_then(|mut f| f.write_all(marker.as_bytes()))
        .unwrap();
    // No --init: both releases start on the data directory they find.
    cluster.spawn_binary(i, &build.picketd, &[]);
    running[i] = build.clone();
    serving_and_caught_up(cluster, i, before.boot + 1).await;
}

/// Waits until replica `i` is at start `boot` of its data directory, recovered it cleanly,
/// serves, and the leader heard it apply a slot within 48 of its own.
async fn serving_and_caught_up(cluster: &Cluster, i: usize, boot: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = support::status_of(&cluster.endpoints[i]).await {
            let storage = status.storage.clone().unwrap_or_default();
            assert!(
                !storage.durable_state_lost && storage.recovery == "clean",
                "node {} did not recover its data directory cleanly: {status:?}; its log:\n{}",
                i + 1,
                cluster.log(i)
            );
            assert_eq!(status.boot, boot, "node {}: {status:?}", i + 1);
            if status.ready {
                let (_, leader) = cluster.current_leader().await;
                let seen = leader
                    .members
                    .iter()
                    .find(|m| m.node_id == i as u64 + 1)
                    .and_then(|m| m.slot_applied);
                if seen.is_some_and(|s| s > 0 && s + 48 >= leader.slot_applied) {
                    return;
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {} does not serve or catch up after its restart; logs:\n{}",
            i + 1,
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Clients of either release keep working while the cluster is mixed: each release's
/// `picketctl lock` takes a key, runs a command under it (which sees its token) and releases it.
async fn both_clients_lock(cluster: &Cluster, previous: &Build, n: usize) {
    let previous_ctl = previous.picketd.with_file_name("picketctl");
    for (who, program) in [
        ("this release's", picketctl_binary().to_path_buf()),
        ("the previous release's", previous_ctl),
    ] {
        let key = format!("cli/{n}");
        let out = tokio::process::Command::new(&program)
            .arg("--endpoints")
            .arg(cluster.endpoints.join(","))
            .args(["lock", "--timeout", "20s", NS, &key, "--"])
            .args([
                "sh",
                "-c",
                "test -n \"$PICKET_TOKEN\" && echo token=$PICKET_TOKEN",
            ])
            .env_remove("PICKET_AUTH_TOKEN")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("token="),
            "{who} picketctl lock {NS} {key} against the mixed cluster: {out:?}"
        );
    }
}

/// `picketctl --json cluster status` (this build's), once every member answers and serves.
async fn cluster_status(cluster: &Cluster) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = cluster
            .picketctl(&["--json", "cluster", "status"])
            .output()
            .await
            .unwrap();
        let json: Option<Value> = serde_json::from_slice(&out.stdout).ok();
        if let Some(json) = json.filter(|j| j["all_serving"] == true) {
            assert!(out.status.success(), "{out:?}");
            return json;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "cluster status: not every member serves: {out:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What every member says about its release and the cluster version, as `picketctl --json
/// cluster status` shows it (each member's `status` object), against the builds that run:
/// a replica of this release says its `release`, the cluster version `cluster_version` and the
/// highest it supports; one of the previous release says none of them (picketctl shows it as
/// release 0.1, no cluster version, supporting 1). `cluster_version`: the version the current
/// replicas must report, and the cluster's as picketctl sums it up.
fn assert_versions(json: &Value, running: &Running, current: &Build, cluster_version: u64) {
    if let Err(wrong) = versions_wrong(json, running, current, cluster_version) {
        panic!("{wrong}");
    }
}

/// [`assert_versions`] as a result: what is wrong, with the member's JSON.
fn versions_wrong(
    json: &Value,
    running: &Running,
    current: &Build,
    cluster_version: u64,
) -> Result<(), String> {
    let members = json["members"].as_array().expect("members");
    let ids: BTreeSet<u64> = members
        .iter()
        .filter_map(|m| m["node_id"].as_u64())
        .collect();
    assert_eq!(ids, BTreeSet::from([1, 2, 3]), "{json:#}");
    // The cluster's version, as picketctl sums it up: the highest a member applied (none while
    // every member runs the previous release, which reports none).
    let any_current = running.iter().any(|r| r.version == current.version);
    let summary = &json["cluster_version"];
    if any_current && summary.as_u64() != Some(cluster_version) {
        return Err(format!(
            "`cluster_version` is {summary}, not {cluster_version}: {json:#}"
        ));
    }
    for member in members {
        let i = member["node_id"].as_u64().unwrap() as usize - 1;
        let status = &member["status"];
        if !status.is_object() {
            return Err(format!("node {} did not answer: {json:#}", i + 1));
        }
        let wrong = if running[i].version == current.version {
            let expected = [
                ("release", Value::from(current.version.as_str())),
                ("cluster_version", Value::from(cluster_version)),
                ("cluster_version_max", Value::from(CLUSTER_VERSION_CURRENT)),
            ];
            expected
                .into_iter()
                .find(|(field, value)| status[*field] != *value)
                .map(|(field, value)| format!("`{field}` is not {value}"))
        } else {
            // The previous release reports none of the three: picketctl shows it as release
            // 0.1, at no cluster version, supporting 1 only.
            let expected = [
                ("release", Value::from("0.1")),
                ("cluster_version", Value::from(0)),
                ("cluster_version_max", Value::from(CLUSTER_VERSION_PREVIOUS)),
            ];
            expected
                .into_iter()
                .find(|(field, value)| status[*field] != *value)
                .map(|(field, value)| {
                    format!(
                        "`{field}` is not {value}, from release {}",
                        running[i].version
                    )
                })
        };
        if let Some(wrong) = wrong {
            return Err(format!("node {}: {wrong}: {member:#}", i + 1));
        }
    }
    Ok(())
}

/// [`assert_versions`] until it holds (the leader steps the cluster version on its own, a
/// little after the last member supports it), up to 30 s.
async fn eventually_versions(cluster: &Cluster, running: &Running, current: &Build, v: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let json = cluster_status(cluster).await;
        match versions_wrong(&json, running, current, v) {
            Ok(()) => return,
            Err(wrong) if tokio::time::Instant::now() >= deadline => {
                panic!("cluster version {v} not reached within 30 s: {wrong}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Every grant in the lock log of `NS` from its oldest retained revision, as (key, token,
/// session), read until the release of the last of the `keys` grants to session `last` (the
/// last thing the test did in `NS`).
async fn lock_log_grants(client: &Client, last: u64, keys: usize) -> Vec<(String, u64, u64)> {
    let mut watcher = client.watch(Some(NS), "", 0);
    let mut grants = Vec::new();
    let mut last_released = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while last_released < keys {
        let page = tokio::time::timeout_at(deadline, watcher.next_page())
            .await
            .unwrap_or_else(|_| panic!("the lock log ends before session {last}'s releases"))
            .unwrap();
        for event in page {
            match event.kind {
                Some(proto::event::Kind::Granted(g)) => {
                    grants.push((event.key.clone(), g.token, g.session_id))
                }
                Some(proto::event::Kind::Released(r)) if r.session_id == last => last_released += 1,
                _ => {}
            }
        }
    }
    grants
}

/// The replica whose elections are slow (its file's election timeout 4x the others'): it
/// seldom leads while the others are up, so the order of the upgrade decides the leaders.
const SLOW: usize = 2;

/// Rewrites replica `i`'s file with an election timeout of 1.2-1.5 s (the others: 0.3-0.6 s).
fn slow_elections(cluster: &Cluster, i: usize) {
    let text = std::fs::read_to_string(&cluster.configs[i]).unwrap();
    let fast = "election_timeout_ms_min = 300\nelection_timeout_ms_max = 600\n";
    assert!(text.contains(fast), "{text}");
    let slow = "election_timeout_ms_min = 1200\nelection_timeout_ms_max = 1500\n";
    std::fs::write(&cluster.configs[i], text.replace(fast, slow)).unwrap();
}

/// docs/upgrades.md's rolling upgrade, with a rollback before the cluster version steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_upgrade_from_the_previous_release_with_a_rollback_under_load() {
    let started = std::time::Instant::now();
    let (previous, current) = builds();
    eprintln!(
        "upgrading picketd {} ({}) to {} ({})",
        previous.version,
        previous.picketd.display(),
        current.version,
        current.picketd.display()
    );

    // Three replicas of the previous release (the Drop of `cluster` kills them by PID and
    // removes the directory, on a panic too).
    let mut cluster = Cluster::configure();
    slow_elections(&cluster, SLOW);
    let mut running: Running = [previous.clone(), previous.clone(), previous.clone()];
    for i in 0..3 {
        cluster.spawn_binary(i, &previous.picketd, &["--init"]);
    }
    let (leader, _) = cluster.current_leader().await;
    let admin = cluster.admin_client("upgrade-admin");
    support::put_class(&admin, NS, support::fenced_class("ledger", 10_000, 60_000)).await;
    let load = Load::start(&cluster).await;
    load.progress(PROGRESS_PER_STEP, "on the previous release")
        .await;

    // A follower first, then the leader: with the slow replica still on the previous release,
    // the first one upgraded is elected, so a leader of this release drives a replica of the
    // previous one (and two of them after the rollback). The slow replica goes last.
    // (docs/upgrades.md upgrades the leader last, to spare a leader change; this order tests
    // more.) Should the slow one lead at the start, it goes second, as the leader.
    let fast_follower = (0..3).find(|i| *i != leader && *i != SLOW).unwrap();
    let order = if leader == SLOW {
        [fast_follower, SLOW, 3 - fast_follower - SLOW]
    } else {
        [fast_follower, leader, SLOW]
    };
    let steps: [(usize, &Build, &str); 5] = [
        (order[0], &current, "first replica upgraded"),
        (order[1], &current, "second replica upgraded"),
        (order[1], &previous, "second replica rolled back"),
        (order[1], &current, "second replica upgraded again"),
        (order[2], &current, "last replica upgraded"),
    ];
    let mut pairings = Vec::new();
    for (n, (i, build, what)) in steps.into_iter().enumerate() {
        let what = format!("{what}: node {}", i + 1);
        load.set_step(&format!("{what} (restarting)"));
        restart_as(&mut cluster, &mut running, i, build).await;
        load.set_step(&what);
        load.progress(PROGRESS_PER_STEP, &what).await;
        let (leader, _) = cluster.current_leader().await;
        let pairing = format!(
            "{what}: node {} leads, running {}; the others run {}",
            leader + 1,
            running[leader].version,
            (0..3)
                .filter(|j| *j != leader)
                .map(|j| running[j].version.as_str())
                .collect::<Vec<_>>()
                .join(" and ")
        );
        eprintln!("{pairing}");
        pairings.push(pairing);
        if n < steps.len() - 1 {
            // Mixed (or back to one release after the rollback): the log stays at the
            // previous release's cluster version.
            let json = cluster_status(&cluster).await;
            assert_versions(&json, &running, &current, CLUSTER_VERSION_PREVIOUS);
            both_clients_lock(&cluster, &previous, n).await;
        }
    }

    // Every member runs this release: the leader steps the cluster version up.
    assert!(running.iter().all(|b| b.version == current.version));
    eventually_versions(&cluster, &running, &current, CLUSTER_VERSION_CURRENT).await;
    load.set_step("after the upgrade");
    load.progress(PROGRESS_PER_STEP, "after the upgrade").await;
    load.outlive_ttl().await;
    let (shared, sessions) = load.stop().await;

    // No client error beyond a leader change's retries, no violation at the resource.
    let problems = shared.problems.lock().unwrap().clone();
    assert!(problems.is_empty(), "{problems:#?}");
    let retried = shared.retried.lock().unwrap().clone();

    // Every session kept its keepalives through the whole run: alive, with the id it started
    // with, and the only sessions that were ever granted anything.
    let ids: BTreeSet<u64> = sessions.iter().map(Session::id).collect();
    assert_eq!(ids.len(), WORKERS);
    for session in &sessions {
        assert!(session.is_alive(), "{session:?}");
        let renewed = session.keepalive_acks().borrow().keepalives;
        assert!(renewed > 0, "{session:?}: no keepalive acknowledged");
        assert!(session.state().borrow().is_healthy(), "{session:?}");
    }
    let resource = std::mem::take(&mut *shared.resource.lock().unwrap());
    for (key, token, session, step) in &resource.grants {
        assert!(
            ids.contains(session),
            "{key} token {token} to {session} ({step})"
        );
    }
    let mut per_step: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, _, _, step) in &resource.grants {
        *per_step.entry(step.as_str()).or_default() += 1;
    }
    for (_, _, what) in steps {
        assert!(
            per_step.keys().any(|s| s.starts_with(what)),
            "no grant while `{what}`: {per_step:#?}"
        );
    }

    // Nothing acknowledged was lost: a fresh session's grant of every key is above every token
    // the resource accepted (a replica that forgot a grant could give a lower one again).
    let keys: BTreeSet<&str> = resource.grants.iter().map(|g| g.0.as_str()).collect();
    assert!(keys.contains(FENCED_KEY), "{keys:?}");
    let client = Client::new(ClientConfig::new(cluster.endpoints.clone(), "after")).unwrap();
    let after = client.create_session().await.unwrap();
    for key in &keys {
        let guard = after.lock(NS, key).await.unwrap();
        let highest = resource.highest(key);
        assert!(
            guard.token().0 > highest,
            "{key}: granted {} after the resource accepted {highest}",
            guard.token().0
        );
        guard.release().await.unwrap();
    }
    let after_id = after.id();
    after.close().await.unwrap();

    // The replicated lock log (kept through snapshots and log replays of both releases) holds
    // every grant the resource saw, and (with no retried call, whose background cancel may
    // release a grant nobody saw) no other grant to the workers' sessions.
    let logged = lock_log_grants(&client, after_id, keys.len()).await;
    let logged: BTreeSet<(String, u64, u64)> = logged
        .into_iter()
        .filter(|(_, _, session)| ids.contains(session))
        .collect();
    let seen: BTreeSet<(String, u64, u64)> = resource
        .grants
        .iter()
        .map(|(key, token, session, _)| (key.clone(), *token, *session))
        .collect();
    assert_eq!(seen.len(), resource.grants.len(), "a grant seen twice");
    let missing: Vec<_> = seen.difference(&logged).collect();
    assert!(
        missing.is_empty(),
        "acknowledged grants not in the lock log: {missing:?}"
    );
    if retried.is_empty() {
        let unseen: Vec<_> = logged.difference(&seen).collect();
        assert!(unseen.is_empty(), "grants nobody acknowledged: {unseen:?}");
    }

    // The workers' sessions are the server's too: closing each (by its id and secret) is
    // answered, with nothing left held.
    for session in sessions {
        let id = session.id();
        let closed = session
            .close()
            .await
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(closed.holds_released, 0, "{id}");
    }

    // The cluster serves at the end, and every member answers.
    let json = json_of(cluster.picketctl(&["--json", "cluster", "status"])).await;
    assert_eq!(json["all_serving"], true, "{json:#}");
    eprintln!(
        "{} grants on {} keys ({per_step:#?}); {} retries of a leader change: {retried:#?}; \
         leaders after each step: {pairings:#?}; the test took {:?}",
        resource.grants.len(),
        keys.len(),
        retried.len(),
        started.elapsed()
    );
}
