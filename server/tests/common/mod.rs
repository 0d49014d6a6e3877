//! Three real `picketd` processes on loopback with OIDC on (a test issuer whose key set is a
//! file) and HTTP (`/metrics`, inspection) on every replica; the `picketctl` binary run as an
//! operator would.
//!
//! `tests/support` starts plain clusters (insecure dev auth, which believes request metadata);
//! this one is separate because with OIDC on, admin calls need bearer tokens and the leader is
//! found through HTTP `/healthz` instead.

#![allow(dead_code)]

#[path = "../support/binaries.rs"]
mod binaries;
#[path = "../support/client.rs"]
mod client;
#[path = "../support/prom.rs"]
mod prom;
#[allow(unused_imports)] // not every test binary runs picketctl
pub use binaries::picketctl_binary;
#[allow(unused_imports)] // not every test binary drives the client library
pub use client::*;
#[allow(unused_imports)] // not every test binary reads metrics
pub use prom::sample;
pub mod alerts;
pub mod console;
pub mod oidc_provider;
pub mod pki;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use picket_server::auth::dev::DevIssuer;
use picket_server::dev::free_ports;

/// The test issuer's `iss` and the audience the cluster expects.
pub const ISSUER: &str = "https://sso.journey.invalid/realms/ops";
pub const AUDIENCE: &str = "picket";

pub struct OidcCluster {
    pub dir: tempfile::TempDir,
    /// Mints tokens the cluster accepts (its key set is `dir/jwks.json`).
    pub issuer: DevIssuer,
    /// gRPC client endpoints, `http://127.0.0.1:port`, by replica index.
    pub endpoints: Vec<String>,
    /// HTTP endpoints (`/metrics`, `/healthz`, `/v1/...`), by replica index.
    pub http: Vec<String>,
    /// With TLS: the test CA and certificates (`https://` endpoints, `picketctl --ca`).
    pub pki: Option<pki::TestPki>,
    procs: Vec<Option<Child>>,
}

/// What a cluster of [`OidcCluster::start_with`] runs with.
#[derive(Clone, Debug)]
pub struct Options {
    /// `[oidc]` with the test issuer.
    pub oidc: bool,
    /// `[tls]` with test certificates made now (client and HTTP ports over TLS).
    pub tls: bool,
    /// `[tls] require_client_cert`: client certificates are credentials (mutual TLS).
    pub mtls: bool,
    /// More configuration appended to every replica's file (e.g. an `[auth]` section);
    /// `{http_address}` in it becomes the replica's own HTTP address (`127.0.0.1:port`).
    pub extra: String,
    /// `[timing]`'s election timeout range in ms (heartbeats every 50 ms). Fast by default; a
    /// test that pins its calls to the leader it found takes a slower range, so that a loaded
    /// machine's late heartbeat does not move the leader under it.
    pub election_timeout_ms: (u64, u64),
}

impl Options {
    /// Mutual TLS instead of OIDC: client certificates are the credentials; `extra` as
    /// [`Options::extra`].
    pub fn mtls(extra: String) -> Options {
        Options {
            oidc: false,
            tls: true,
            mtls: true,
            extra,
            ..Options::default()
        }
    }
}

/// The election timeouts of a test whose calls go to one replica, the leader it found first.
pub const STABLE_ELECTIONS_MS: (u64, u64) = (2_000, 4_000);

impl Default for Options {
    fn default() -> Options {
        Options {
            oidc: true,
            tls: false,
            mtls: false,
            extra: String::new(),
            election_timeout_ms: (300, 600),
        }
    }
}

impl OidcCluster {
    /// Writes the key set and three configuration files (free ports, fast elections, `[oidc]`
    /// with the key set file, `http_listen`) and starts the processes.
    pub fn start() -> OidcCluster {
        OidcCluster::start_with(Options::default())
    }

    /// [`OidcCluster::start`] with `options`.
    pub fn start_with(options: Options) -> OidcCluster {
        let dir = tempfile::Builder::new()
            .prefix("picket-journey-")
            .tempdir()
            .unwrap();
        let issuer = DevIssuer::generate(ISSUER, AUDIENCE).unwrap();
        let jwks = dir.path().join("jwks.json");
        issuer.write_jwks(&jwks).unwrap();
        let free = free_ports(9).unwrap();
        let ports: Vec<(u16, u16, u16)> = (0..3)
            .map(|i| (free[3 * i], free[3 * i + 1], free[3 * i + 2]))
            .collect();
        let mut members = String::new();
        for (i, (client, peer, http)) in ports.iter().enumerate() {
            members.push_str(&format!(
                "[[members]]\nid = {}\npeer_address = \"127.0.0.1:{peer}\"\nclient_address = \"127.0.0.1:{client}\"\nhttp_address = \"127.0.0.1:{http}\"\n",
                i + 1
            ));
        }
        let scheme = if options.tls { "https" } else { "http" };
        let pki = options
            .tls
            .then(|| pki::TestPki::new(&dir.path().join("pki")));
        let mut sections = String::new();
        if options.oidc {
            sections.push_str(&format!(
                "[oidc]\nissuer = {ISSUER:?}\naudiences = [{AUDIENCE:?}]\njwks_file = {jwks:?}\n"
            ));
        }
        if let Some(pki) = &pki {
            sections.push_str(&format!(
                "[tls]\ncert = {:?}\nkey = {:?}\nca = {:?}\nrequire_client_cert = {}\n",
                pki.node.cert, pki.node.key, pki.ca, options.mtls
            ));
        }
        let mut cluster = OidcCluster {
            endpoints: ports
                .iter()
                .map(|(client, _, _)| format!("{scheme}://127.0.0.1:{client}"))
                .collect(),
            http: ports
                .iter()
                .map(|(_, _, http)| format!("{scheme}://127.0.0.1:{http}"))
                .collect(),
            dir,
            issuer,
            pki,
            procs: vec![None, None, None],
        };
        for (i, (_, _, http)) in ports.iter().enumerate() {
            let text = format!(
                "cluster_id = \"journey\"\nnode_id = {}\ndata_dir = \"node-{}\"\n\
                 http_listen = \"127.0.0.1:{http}\"\n{members}\n\
                 {sections}\
                 [timing]\nelection_timeout_ms_min = {}\nelection_timeout_ms_max = {}\nheartbeat_ms = 50\n\
                 [storage]\npreallocate_bytes = 0\n{}\n",
                i + 1,
                i + 1,
                options.election_timeout_ms.0,
                options.election_timeout_ms.1,
                options
                    .extra
                    .replace("{http_address}", &format!("127.0.0.1:{http}")),
            );
            let path = cluster.dir.path().join(format!("node-{}.toml", i + 1));
            std::fs::write(&path, text).unwrap();
            cluster.spawn(i, &path);
        }
        cluster
    }

    fn spawn(&mut self, i: usize, config: &PathBuf) {
        let log =
            std::fs::File::create(self.dir.path().join(format!("node-{}.log", i + 1))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_picketd"))
            .arg("run")
            // A new cluster on the first start; ignored on restarts (the data is there).
            .arg("--init")
            .arg("--config")
            .arg(config)
            .env(
                "RUST_LOG",
                std::env::var("PICKET_E2E_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.procs[i] = Some(child);
    }

    /// Stops replica `i` (`kill -9` of its process, then waits for it). No-op if stopped.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.procs[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The replicas' logs, for failure messages.
    pub fn logs(&self) -> String {
        (0..3)
            .map(|i| {
                let text =
                    std::fs::read_to_string(self.dir.path().join(format!("node-{}.log", i + 1)))
                        .unwrap_or_default();
                format!("--- node {} ---\n{text}", i + 1)
            })
            .collect()
    }

    /// A bearer token for `principal` with `roles`, valid for ten minutes.
    pub fn token(&self, principal: &str, roles: &[&str]) -> String {
        self.issuer.mint(principal, roles, Duration::from_secs(600))
    }

    /// The index of the replica whose `/healthz` says it is the leader, waiting up to `timeout`.
    pub async fn leader(&self, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            for (i, http) in self.http.iter().enumerate() {
                if let Ok((200, body)) = self.get(&format!("{http}/healthz"), None, None).await {
                    if body.contains("\"role\":\"leader\"") {
                        return i;
                    }
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no leader within {timeout:?}:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs `picketctl --json --endpoints <all> [--auth-token TOKEN] ARGS` and answers its exit
    /// status and its stdout parsed as JSON (`Null` when it printed nothing).
    pub async fn picketctl(&self, token: Option<&str>, args: &[&str]) -> Ctl {
        self.picketctl_cert(None, token, args).await
    }

    /// `picketctl force-release approve ID --ack ACK` as the holder of `token`: its JSON answer.
    pub async fn approve(&self, token: &str, id: &str, ack: &str) -> serde_json::Value {
        let args = ["force-release", "approve", id, "--ack", ack];
        self.picketctl(Some(token), &args).await.ok()
    }

    /// [`OidcCluster::picketctl`] presenting the client certificate `cert` (`--cert/--key`).
    pub async fn picketctl_cert(
        &self,
        cert: Option<&pki::Pem>,
        token: Option<&str>,
        args: &[&str],
    ) -> Ctl {
        let (code, stdout, stderr) = self.picketctl_run(token, cert, true, args).await;
        let json = stdout
            .lines()
            .find(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!("picketctl {args:?} printed non-JSON ({e}): {stdout}")
                })
            })
            .unwrap_or(serde_json::Value::Null);
        Ctl { code, json, stderr }
    }

    /// Runs `picketctl` without `--json`, as a person reads it: the text it printed, after
    /// checking it succeeded.
    pub async fn picketctl_text(&self, token: Option<&str>, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.picketctl_run(token, None, false, args).await;
        assert_eq!(code, 0, "picketctl {args:?} failed: {stdout}{stderr}");
        stdout
    }

    /// `picketctl` without `--json` and with `cert`: exit status, stdout and stderr, as a
    /// person reads them.
    pub async fn picketctl_plain(
        &self,
        cert: Option<&pki::Pem>,
        token: Option<&str>,
        args: &[&str],
    ) -> (i32, String, String) {
        self.picketctl_run(token, cert, false, args).await
    }

    /// The TLS flags of a picketctl run: `--ca` when the cluster has TLS, `--cert/--key` for
    /// `cert`.
    fn tls_flags(&self, command: &mut tokio::process::Command, cert: Option<&pki::Pem>) {
        command
            .env_remove("PICKET_CA")
            .env_remove("PICKET_CERT")
            .env_remove("PICKET_KEY");
        if let Some(pki) = &self.pki {
            command.arg("--ca").arg(&pki.ca);
        }
        if let Some(cert) = cert {
            command
                .arg("--cert")
                .arg(&cert.cert)
                .arg("--key")
                .arg(&cert.key);
        }
    }

    /// `GET url` with the cluster's CA (and `cert`, and `token` as a bearer) when it has TLS.
    pub async fn get(
        &self,
        url: &str,
        token: Option<&str>,
        cert: Option<&pki::Pem>,
    ) -> Result<(u16, String), reqwest::Error> {
        let mut builder = reqwest::Client::builder().timeout(Duration::from_secs(5));
        if let Some(pki) = &self.pki {
            let ca = std::fs::read(&pki.ca).unwrap();
            builder = builder
                .add_root_certificate(reqwest::Certificate::from_pem(&ca)?)
                .tls_built_in_root_certs(false);
        }
        if let Some(cert) = cert {
            let mut pem = std::fs::read(&cert.cert).unwrap();
            pem.extend(std::fs::read(&cert.key).unwrap());
            builder = builder.identity(reqwest::Identity::from_pem(&pem)?);
        }
        let mut request = builder.build()?.get(url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }

    async fn picketctl_run(
        &self,
        token: Option<&str>,
        cert: Option<&pki::Pem>,
        json: bool,
        args: &[&str],
    ) -> (i32, String, String) {
        let mut command = tokio::process::Command::new(picketctl_binary());
        self.tls_flags(&mut command, cert);
        if json {
            command.arg("--json");
        }
        command
            .arg("--endpoints")
            .arg(self.endpoints.join(","))
            .env_remove("PICKET_AUTH_TOKEN")
            .env_remove("PICKET_PRINCIPAL")
            .env_remove("PICKET_ROLES")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(token) = token {
            command.arg("--auth-token").arg(token);
        }
        let output = command.args(args).output().await.unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

impl OidcCluster {
    /// Starts a long-running `picketctl --json ... ARGS` (e.g. `watch`); its stdout lines,
    /// parsed as JSON, arrive on the receiver. Killed when the returned child is dropped.
    pub fn picketctl_stream(
        &self,
        token: Option<&str>,
        args: &[&str],
    ) -> (
        tokio::process::Child,
        tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>,
    ) {
        self.picketctl_stream_cert(None, token, args)
    }

    /// [`OidcCluster::picketctl_stream`] presenting the client certificate `cert`.
    pub fn picketctl_stream_cert(
        &self,
        cert: Option<&pki::Pem>,
        token: Option<&str>,
        args: &[&str],
    ) -> (
        tokio::process::Child,
        tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>,
    ) {
        use tokio::io::AsyncBufReadExt;
        let mut command = tokio::process::Command::new(picketctl_binary());
        self.tls_flags(&mut command, cert);
        command
            .arg("--json")
            .arg("--endpoints")
            .arg(self.endpoints.join(","))
            .env_remove("PICKET_AUTH_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(token) = token {
            command.arg("--auth-token").arg(token);
        }
        let mut child = command.args(args).spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("picketctl printed non-JSON ({e}): {line}"));
                if tx.send(value).is_err() {
                    return;
                }
            }
        });
        (child, rx)
    }
}

impl Drop for OidcCluster {
    fn drop(&mut self) {
        for child in self.procs.iter_mut().filter_map(Option::take) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One `picketctl` run.
#[derive(Debug)]
pub struct Ctl {
    pub code: i32,
    pub json: serde_json::Value,
    pub stderr: String,
}

impl Ctl {
    /// The JSON answer of a successful run.
    #[track_caller]
    pub fn ok(self) -> serde_json::Value {
        assert_eq!(self.code, 0, "picketctl failed: {self:?}");
        self.json
    }

    /// The `rule` of a refused run, after checking its exit status.
    #[track_caller]
    pub fn refused(self, code: i32) -> (String, String) {
        assert_eq!(self.code, code, "picketctl exit status: {self:?}");
        (
            self.json["rule"].as_str().unwrap_or_default().to_owned(),
            self.json["error"].as_str().unwrap_or_default().to_owned(),
        )
    }
}

/// `GET url`: status and body.
pub async fn get(url: &str) -> Result<(u16, String), reqwest::Error> {
    get_as(url, None).await
}

/// `GET url` with `Authorization: Bearer <token>` when given: status and body.
pub async fn get_as(url: &str, token: Option<&str>) -> Result<(u16, String), reqwest::Error> {
    let mut request = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?
        .get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

/// Polls `probe` every 50 ms until it answers `Some`, failing after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {timeout:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
