//! Three real `picketd` processes on loopback, and a minimal gRPC client for them.

#![allow(dead_code)]

mod binaries;
mod client;
mod prom;
#[allow(unused_imports)] // not every test binary runs picketctl
pub use binaries::picketctl_binary;
#[allow(unused_imports)] // not every test binary drives the client library
pub use client::*;
#[allow(unused_imports)] // not every test binary reads metrics
pub use prom::sample;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use picket_proto::proto;
use picket_proto::proto::admin_client::AdminClient;
use picket_proto::proto::lock_client::LockClient;
use picket_server::dev::{free_ports, DevCluster};
use tonic::transport::Channel;
use tonic::{Code, Status};

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub configs: Vec<PathBuf>,
    pub endpoints: Vec<String>,
    /// Each replica's own `[[members]]` entry, by index.
    pub entries: Vec<String>,
    procs: Vec<Option<Child>>,
}

impl Cluster {
    /// Writes three configuration files (free ports, fast elections) and starts the processes.
    pub fn start() -> Cluster {
        Cluster::start_with(false)
    }

    /// With `tls`, every replica uses the test certificates of `tests/tls` (mutual TLS between
    /// replicas, `https://` for clients).
    pub fn start_with(tls: bool) -> Cluster {
        Cluster::start_configured(tls, "")
    }

    /// [`Cluster::start_with`], with `extra` (TOML sections, e.g. `[limits]`) appended to every
    /// replica's configuration file.
    pub fn start_configured(tls: bool, extra: &str) -> Cluster {
        Cluster::start_storage(tls, "", extra)
    }

    /// [`Cluster::start`] with the group commits written by `persist` (`[storage] persist`:
    /// `"inline"` or `"thread"`).
    pub fn start_persisting(persist: &str) -> Cluster {
        Cluster::start_storage(false, &format!("persist = {persist:?}\n"), "")
    }

    /// [`Cluster::start`] compacting its log every `slots` slots (16 otherwise): a large value
    /// keeps the log from slot 1, so a replica that catches up replays it.
    pub fn start_snapshot_every(slots: u64) -> Cluster {
        Cluster::start_storage(false, &format!("snapshot_every_slots = {slots}\n"), "")
    }

    /// `storage` (keys of `[storage]`) and `extra` (whole sections) go into every file.
    fn start_storage(tls: bool, storage: &str, extra: &str) -> Cluster {
        let mut cluster = Cluster::configure_storage(tls, storage, extra);
        for i in 0..3 {
            cluster.spawn(i);
        }
        cluster
    }

    /// The three files of [`Cluster::start`], written, and no replica started: the caller
    /// starts each one ([`Cluster::spawn_binary`] for another build of `picketd`).
    pub fn configure() -> Cluster {
        Cluster::configure_storage(false, "", "")
    }

    fn configure_storage(tls: bool, storage: &str, extra: &str) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("picket-e2e-")
            .tempdir()
            .unwrap();
        let free = free_ports(6).unwrap();
        let ports: Vec<(u16, u16)> = (0..3).map(|i| (free[2 * i], free[2 * i + 1])).collect();
        let mut members = String::new();
        let mut entries = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let entry = format!(
                "[[members]]\nid = {}\npeer_address = \"127.0.0.1:{peer}\"\nclient_address = \"127.0.0.1:{client}\"\n",
                i + 1
            );
            members.push_str(&entry);
            entries.push(entry);
        }
        let tls_section = if tls {
            let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
            format!(
                "[tls]\ncert = {:?}\nkey = {:?}\nca = {:?}\n",
                fixtures.join("node.pem"),
                fixtures.join("node.key"),
                fixtures.join("ca.pem")
            )
        } else {
            String::new()
        };
        let scheme = if tls { "https" } else { "http" };
        let snapshot_every = if storage.contains("snapshot_every_slots") {
            ""
        } else {
            "snapshot_every_slots = 16\n"
        };
        let mut configs = Vec::new();
        for i in 0..3 {
            let text = format!(
                "cluster_id = \"e2e\"\nnode_id = {}\ndata_dir = \"node-{}\"\ninsecure_dev_auth = true\n{members}\n[timing]\nelection_timeout_ms_min = 300\nelection_timeout_ms_max = 600\nheartbeat_ms = 50\n[storage]\npreallocate_bytes = 0\n{snapshot_every}{storage}{tls_section}{extra}",
                i + 1,
                i + 1
            );
            let path = dir.path().join(format!("node-{}.toml", i + 1));
            std::fs::write(&path, text).unwrap();
            configs.push(path);
        }
        let endpoints: Vec<String> = ports
            .iter()
            .map(|(client, _)| format!("{scheme}://127.0.0.1:{client}"))
            .collect();
        register_cluster(&endpoints);
        Cluster {
            dir,
            configs,
            endpoints,
            entries,
            procs: vec![None, None, None],
        }
    }

    /// Writes the configuration of a new replica (id: the next index + 1) that joins the
    /// cluster (`join = true`, listing itself and the first three members) on free ports, and
    /// starts it with `--init`. Returns its index and its peer and client `host:port`.
    pub fn start_joiner(&mut self) -> (usize, String, String) {
        self.start_joiner_with_contacts(&[0, 1, 2])
    }

    /// [`Cluster::start_joiner`] with a file that lists itself and only the replicas of
    /// index `contacts` (docs/runbooks/replace-machine.md: "any of the running ones").
    pub fn start_joiner_with_contacts(&mut self, contacts: &[usize]) -> (usize, String, String) {
        let i = self.configs.len();
        let free = free_ports(2).unwrap();
        let (client, peer) = (
            format!("127.0.0.1:{}", free[0]),
            format!("127.0.0.1:{}", free[1]),
        );
        let me = format!(
            "[[members]]\nid = {}\npeer_address = \"{peer}\"\nclient_address = \"{client}\"\n",
            i + 1
        );
        self.entries.push(me);
        let path = self.dir.path().join(format!("node-{}.toml", i + 1));
        self.configs.push(path);
        self.write_contact_file(i, contacts);
        self.endpoints.push(format!("http://{client}"));
        register_cluster(&self.endpoints);
        self.procs.push(None);
        self.spawn(i);
        (i, peer, client)
    }

    /// Rewrites replica `i`'s file as a contact list: `join = true`, its own entry and those
    /// of the replicas of index `contacts`; the rest (timing, storage) as the first file's.
    pub fn write_contact_file(&self, i: usize, contacts: &[usize]) {
        let first = std::fs::read_to_string(&self.configs[0]).unwrap();
        let timing_at = first.find("[timing]").unwrap();
        let mut members = self.entries[i].clone();
        for c in contacts {
            members.push_str(&self.entries[*c]);
        }
        let text = format!(
            "cluster_id = \"e2e\"\nnode_id = {}\ndata_dir = \"node-{}\"\ninsecure_dev_auth = true\njoin = true\n{members}\n{}",
            i + 1,
            i + 1,
            &first[timing_at..]
        );
        std::fs::write(&self.configs[i], text).unwrap();
    }

    /// The data directory of replica `i`.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node-{}", i + 1))
    }

    /// Starts replica `i` (`--init`: a new cluster on the first start, ignored on restarts).
    pub fn spawn(&mut self, i: usize) {
        self.spawn_with(i, &["--init"]);
    }

    /// Starts replica `i` with `flags` after `picketd run`.
    pub fn spawn_with(&mut self, i: usize, flags: &[&str]) {
        self.spawn_binary(
            i,
            std::path::Path::new(env!("CARGO_BIN_EXE_picketd")),
            flags,
        );
    }

    /// Starts replica `i` as `binary run FLAGS --config <its file>` (another release's
    /// `picketd`, for the upgrade test), its stderr appended to the replica's log.
    pub fn spawn_binary(&mut self, i: usize, binary: &std::path::Path, flags: &[&str]) {
        assert!(self.procs[i].is_none(), "node {i} already runs");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("node-{}.log", i + 1)))
            .unwrap();
        let child = self
            .command_binary(i, binary, flags)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.procs[i] = Some(child);
    }

    /// `picketd run --config <replica i's file>` with `flags`, not started.
    pub fn command(&self, i: usize, flags: &[&str]) -> Command {
        self.command_binary(
            i,
            std::path::Path::new(env!("CARGO_BIN_EXE_picketd")),
            flags,
        )
    }

    /// [`Cluster::command`] of `binary`.
    pub fn command_binary(&self, i: usize, binary: &std::path::Path, flags: &[&str]) -> Command {
        let mut command = Command::new(binary);
        command
            .arg("run")
            .args(flags)
            .arg("--config")
            .arg(&self.configs[i])
            .env(
                "RUST_LOG",
                std::env::var("PICKET_E2E_LOG").unwrap_or_else(|_| "info".into()),
            );
        command
    }

    /// `kill -9`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.procs[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for a clean exit.
    pub fn terminate(&mut self, i: usize) -> std::process::ExitStatus {
        let mut child = self.procs[i].take().expect("running");
        let pid = child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        for _ in 0..200 {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        panic!("node {i} did not stop within 10 s of SIGTERM");
    }

    /// The process id of replica `i`, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.procs[i].as_ref().map(Child::id)
    }

    /// Sends `signal` (e.g. `-STOP`, `-CONT`) to every running replica.
    pub fn signal_all(&self, signal: &str) {
        for i in self.running() {
            let pid = self.pid(i).expect("running").to_string();
            let status = Command::new("kill").args([signal, &pid]).status().unwrap();
            assert!(status.success(), "kill {signal} {pid}");
        }
    }

    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("node-{}.log", i + 1)))
            .unwrap_or_default()
    }

    pub fn running(&self) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|i| self.procs[*i].is_some())
            .collect()
    }

    /// Every replica's log, one after the other (for a failure message).
    pub fn logs(&self) -> String {
        (0..self.procs.len())
            .map(|i| format!("--- node {}:\n{}", i + 1, self.log(i)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The replica that leads and serves now (its own `GetReplicaStatus` says so), and its
    /// status, waiting up to 30 s.
    pub async fn current_leader(&self) -> (usize, proto::ReplicaStatus) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            for i in self.running() {
                if let Some(status) = status_of(&self.endpoints[i]).await {
                    if status.role == "leader" && status.ready {
                        return (i, status);
                    }
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no leader serves; logs:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A client-library client (dev auth: `alice`, `class-admin`) of every replica running
    /// now, named `name`.
    pub fn admin_client(&self, name: &str) -> picket_client::Client {
        use picket_client::{Client, ClientConfig, Credentials};
        let endpoints: Vec<String> = self
            .running()
            .into_iter()
            .map(|i| self.endpoints[i].clone())
            .collect();
        let mut config = ClientConfig::new(endpoints, name);
        config.credentials = Credentials {
            principal: Some("alice".into()),
            roles: Some("class-admin".into()),
            bearer: None,
        };
        Client::new(config).unwrap()
    }

    /// The index of the ready leader (it answers a linearizable read, and still does an
    /// election timeout later: right after start, duelling candidates may depose a first
    /// leader), waiting up to `timeout`.
    pub async fn leader(&self, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(i) = self.answering_leader().await {
                tokio::time::sleep(Duration::from_millis(600)).await;
                if self.answering_leader().await == Some(i) {
                    return i;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no leader within {timeout:?}; logs:\n{}\n{}\n{}",
                self.log(0),
                self.log(1),
                self.log(2)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `picketctl --endpoints <every replica> ARGS`, not started: no token from the
    /// environment, no stdin, killed when dropped.
    pub fn picketctl(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(picketctl_binary());
        command
            .arg("--endpoints")
            .arg(self.endpoints.join(","))
            .env_remove("PICKET_AUTH_TOKEN")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command.args(args);
        command
    }

    /// [`Cluster::picketctl`] as `principal` with `roles` (insecure dev auth).
    pub fn picketctl_as(
        &self,
        principal: &str,
        roles: &str,
        args: &[&str],
    ) -> tokio::process::Command {
        let mut command = self.picketctl(&["--principal", principal, "--roles", roles]);
        command.args(args);
        command
    }

    async fn answering_leader(&self) -> Option<usize> {
        for i in self.running() {
            if let Ok(mut admin) = admin(&self.endpoints[i]).await {
                let read = admin
                    .longest_holds(proto::LongestHoldsRequest { allow_stale: false })
                    .await;
                if read.is_ok() {
                    return Some(i);
                }
            }
        }
        None
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.procs.len() {
            self.kill(i);
        }
    }
}

/// A client-library client of every replica of `cluster`, named `name`, asking for sessions of
/// `ttl`: as `principal` with the role `on-call` (dev auth), or with no credentials at all.
pub fn on_call_client(
    cluster: &Cluster,
    name: &str,
    ttl: Duration,
    principal: Option<&str>,
) -> picket_client::Client {
    let mut config = picket_client::ClientConfig::new(cluster.endpoints.clone(), name);
    config.session_ttl = Some(ttl);
    if let Some(principal) = principal {
        config.credentials = dev_credentials(principal, "on-call");
    }
    picket_client::Client::new(config).unwrap()
}

/// `picketctl --endpoints <every replica> ARGS` (e.g. `lock`) started in the background, its
/// stderr lines collected as they come; killed when dropped.
pub struct Picketctl {
    child: std::process::Child,
    stderr: std::sync::Arc<Mutex<Vec<String>>>,
}

impl Picketctl {
    pub fn start(cluster: &Cluster, args: &[&str]) -> Picketctl {
        let mut child = Command::new(picketctl_binary())
            .arg("--endpoints")
            .arg(cluster.endpoints.join(","))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::sync::Arc::new(Mutex::new(Vec::new()));
        let pipe = child.stderr.take().unwrap();
        let lines = stderr.clone();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(pipe)).map_while(Result::ok)
            {
                lines.lock().unwrap().push(line);
            }
        });
        Picketctl { child, stderr }
    }

    pub fn lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    pub async fn wait_for_line(&self, what: &str, within: Duration) -> String {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(line) = self.lines().into_iter().find(|l| l.contains(what)) {
                return line;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "picketctl said no `{what}` within {within:?}: {:#?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn exit_code(&mut self, within: Duration) -> i32 {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().expect("exited, not signalled");
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "picketctl still runs after {within:?}: {:#?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Picketctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Cluster {
    /// A session named `name` of a client-library client of every replica, with a 10 s TTL.
    pub async fn session(&self, name: &str) -> picket_client::Session {
        let mut config = picket_client::ClientConfig::new(self.endpoints.clone(), name);
        config.session_ttl = Some(Duration::from_secs(10));
        let client = picket_client::Client::new(config).unwrap();
        client.create_session().await.unwrap()
    }

    /// `ns`/`key` as replica `i` shows it.
    pub fn key_at(&self, i: usize, ns: &str, key: &str) -> KeyAt {
        KeyAt {
            endpoint: self.endpoints[i].clone(),
            ns: ns.to_owned(),
            key: key.to_owned(),
        }
    }
}

/// One key as one replica's inspection shows it ([`Cluster::key_at`]).
pub struct KeyAt {
    pub endpoint: String,
    pub ns: String,
    pub key: String,
}

impl KeyAt {
    /// Waits (15 s at the most) until the inspection satisfies `ok`, and returns it.
    pub async fn until(&self, what: &str, ok: impl Fn(&proto::KeyInfo) -> bool) -> proto::KeyInfo {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let info = inspect(&self.endpoint, &self.ns, &self.key, false)
                .await
                .unwrap();
            if ok(&info) {
                return info;
            }
            assert!(tokio::time::Instant::now() < deadline, "{what}: {info:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Waits (10 s at the most) for `child` (a picketctl whose command was told to stop) to exit
/// successfully.
pub async fn exits_successfully(child: &mut tokio::process::Child) {
    let code = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("picketctl exits when its command does")
        .unwrap();
    assert!(code.success(), "{code:?}");
}

/// Runs `command` (a `picketctl lock --no-wait` of a held key) and asserts that it exits with
/// picketctl's status for busy (5).
pub async fn assert_busy(mut command: tokio::process::Command) {
    let busy = command.output().await.unwrap();
    assert_eq!(busy.status.code(), Some(5), "picketctl: busy");
}

/// [`Cluster::start`] with a leader elected within `election`: the cluster, the leader's index
/// and its endpoint.
pub async fn cluster_with_leader(election: Duration) -> (Cluster, usize, String) {
    let cluster = Cluster::start();
    let leader = cluster.leader(election).await;
    let at = cluster.endpoints[leader].clone();
    (cluster, leader, at)
}

/// A command for `picketctl lock ... -- sh -c` that holds the lock until the test says stop:
/// it waits for a stop file in a temporary directory of its own. Bounded (60 s): if the test
/// fails, picketctl is killed but this command, in its own process group, is not; it must end
/// by itself once its stop file's directory is gone.
pub struct HoldUntilStopped {
    dir: tempfile::TempDir,
}

impl HoldUntilStopped {
    pub fn new() -> HoldUntilStopped {
        HoldUntilStopped {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A file `name` in the directory (for the command to write to).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The script: `first`, then the wait for the stop file.
    pub fn script(&self, first: &str) -> String {
        format!(
            "{first}i=0; while [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
            self.file("stop").display()
        )
    }

    /// Tells the command to end.
    pub fn stop(&self) {
        std::fs::write(self.file("stop"), b"").unwrap();
    }
}

/// Runs `command` to success and parses its standard output as JSON.
pub async fn json_of(mut command: tokio::process::Command) -> serde_json::Value {
    let out = command.output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An in-process dev cluster (`DevCluster::start`) with a leader elected: the cluster, the
/// leader's index and its client endpoint.
pub async fn dev_cluster_with_leader() -> (DevCluster, usize, String) {
    let cluster = DevCluster::start().await.unwrap();
    let leader = cluster
        .wait_for_leader(Duration::from_secs(10))
        .await
        .expect("a leader within 10 s");
    let at = cluster.client_endpoint(leader);
    (cluster, leader, at)
}

/// A channel to `endpoint`; `https://` endpoints trust the test CA of `tests/tls`.
pub async fn channel(endpoint: &str) -> Result<Channel, tonic::transport::Error> {
    let mut builder = tonic::transport::Endpoint::from_shared(endpoint.to_owned())?
        .connect_timeout(Duration::from_millis(500))
        .timeout(Duration::from_secs(15));
    if endpoint.starts_with("https://") {
        let ca = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls/ca.pem"),
        )
        .unwrap();
        builder = builder.tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca)),
        )?;
    }
    builder.connect().await
}

pub async fn lock(endpoint: &str) -> Result<LockClient<Channel>, tonic::transport::Error> {
    Ok(LockClient::new(channel(endpoint).await?))
}

pub async fn admin(endpoint: &str) -> Result<AdminClient<Channel>, tonic::transport::Error> {
    Ok(AdminClient::new(channel(endpoint).await?))
}

/// endpoint -> its cluster (the first endpoint of the cluster), so that a session created at
/// one replica is found when a helper is called at another.
static CLUSTERS: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
/// (cluster, session id) -> the secret the helpers created the session with.
static SECRETS: Mutex<BTreeMap<(String, u64), Vec<u8>>> = Mutex::new(BTreeMap::new());

fn register_cluster(endpoints: &[String]) {
    let mut clusters = CLUSTERS.lock().unwrap();
    for endpoint in endpoints {
        clusters.insert(endpoint.clone(), endpoints[0].clone());
    }
}

fn cluster_of(endpoint: &str) -> String {
    let clusters = CLUSTERS.lock().unwrap();
    clusters
        .get(endpoint)
        .cloned()
        .unwrap_or_else(|| endpoint.to_owned())
}

/// The secret `create_session` used for `session` of the cluster behind `endpoint` (a session
/// the helpers did not create gets a secret nobody has).
pub fn secret_of(endpoint: &str, session: u64) -> Vec<u8> {
    SECRETS
        .lock()
        .unwrap()
        .get(&(cluster_of(endpoint), session))
        .cloned()
        .unwrap_or_else(|| vec![0xee; 32])
}

pub async fn create_session(endpoint: &str, name: &str, ttl_ms: u64) -> u64 {
    try_create_session(endpoint, name, ttl_ms).await.unwrap()
}

/// Creates a session with a fresh secret, remembered for the helpers below (`secret_of`).
pub async fn try_create_session(endpoint: &str, name: &str, ttl_ms: u64) -> Result<u64, Status> {
    let mut client = lock(endpoint)
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let secret = picket_proto::secret::SessionSecret::generate();
    let session = client
        .create_session(proto::CreateSessionRequest {
            ttl_ms: Some(ttl_ms),
            identity: Some(proto::ClientIdentity {
                name: name.into(),
                host: "test".into(),
                pid: std::process::id(),
            }),
            session_secret: secret.as_bytes().to_vec(),
        })
        .await?
        .into_inner()
        .session_id;
    let key = (cluster_of(endpoint), session);
    SECRETS
        .lock()
        .unwrap()
        .insert(key, secret.as_bytes().to_vec());
    Ok(session)
}

/// Calls `f` with an endpoint, following `not_leader` hints (or trying the next member) for up
/// to 10 s, as a client library would; any other error is returned.
pub async fn at_leader<T, F, Fut>(endpoints: &[String], first: usize, f: F) -> Result<T, Status>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<T, Status>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut at = first;
    loop {
        match f(endpoints[at].clone()).await {
            Err(status)
                if status.code() == Code::Unavailable && tokio::time::Instant::now() < deadline =>
            {
                let hint = picket_proto::status::leader_hint(&status)
                    .and_then(|h| h.node_id)
                    .map(|n| n as usize - 1);
                at = hint.unwrap_or((at + 1) % endpoints.len());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

pub async fn acquire(
    endpoint: &str,
    session: u64,
    request: u64,
    ns: &str,
    key: &str,
    wait_ms: u64,
) -> Result<proto::AcquireResponse, Status> {
    let mut client = lock(endpoint)
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    client
        .acquire(proto::AcquireRequest {
            session_id: session,
            request_id: request,
            namespace: ns.into(),
            key: key.into(),
            wait_ms,
            session_secret: secret_of(endpoint, session),
            wait_timeout_ms: 0,
            mode: 0,
        })
        .await
        .map(|r| r.into_inner())
}

pub async fn release(
    endpoint: &str,
    session: u64,
    request: u64,
    ns: &str,
    key: &str,
    token: u64,
) -> Result<proto::ReleaseResponse, Status> {
    let mut client = lock(endpoint)
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    client
        .release(proto::ReleaseRequest {
            session_id: session,
            request_id: request,
            namespace: ns.into(),
            key: key.into(),
            token,
            session_secret: secret_of(endpoint, session),
        })
        .await
        .map(|r| r.into_inner())
}

/// One keepalive on a fresh stream.
pub async fn keepalive(endpoint: &str, session: u64) -> Result<proto::KeepAliveResponse, Status> {
    let mut client = lock(endpoint)
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(proto::KeepAliveRequest {
        session_id: session,
        seq: 1,
        session_secret: secret_of(endpoint, session),
    })
    .await
    .unwrap();
    let mut responses = client
        .keep_alive(picket_server::api::stream::ChannelStream::new(rx))
        .await?
        .into_inner();
    let first = responses.message().await?;
    drop(tx);
    first.ok_or_else(|| Status::unavailable("keepalive stream ended without an answer"))
}

pub async fn inspect(
    endpoint: &str,
    ns: &str,
    key: &str,
    stale: bool,
) -> Result<proto::KeyInfo, Status> {
    let mut client = admin(endpoint)
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    client
        .inspect(proto::InspectRequest {
            namespace: ns.into(),
            key: key.into(),
            allow_stale: stale,
        })
        .await
        .map(|r| r.into_inner())
}

pub fn granted(response: &proto::AcquireResponse) -> Option<u64> {
    match response.reply.as_ref()?.kind.as_ref()? {
        proto::acquire_reply::Kind::Granted(g) => Some(g.token),
        _ => None,
    }
}

pub fn rule(status: &Status) -> String {
    picket_proto::status::error_detail(status)
        .map(|d| d.rule)
        .unwrap_or_default()
}

pub fn assert_code(
    result: Result<impl std::fmt::Debug, Status>,
    code: Code,
    rule_name: &str,
) -> Status {
    let status = result.expect_err("the call must fail");
    assert_eq!(status.code(), code, "{status:?}");
    if !rule_name.is_empty() {
        assert_eq!(rule(&status), rule_name, "{status:?}");
    }
    status
}

/// A replica's own status, if it answers.
pub async fn status_of(endpoint: &str) -> Option<proto::ReplicaStatus> {
    let mut client = admin(endpoint).await.ok()?;
    client
        .get_replica_status(proto::GetReplicaStatusRequest {})
        .await
        .ok()
        .map(|r| r.into_inner())
}
