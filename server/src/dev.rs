//! [`DevCluster`]: a 3-replica cluster in one process on 127.0.0.1, for `picketd dev` and tests.
//!
//! ```no_run
//! # async fn demo() -> Result<(), picket_server::server::StartError> {
//! use picket_server::dev::DevCluster;
//! let mut cluster = DevCluster::start().await?; // temp dir, ephemeral ports, fast elections
//! let endpoints = cluster.client_endpoints(); // ["http://127.0.0.1:PORT", ...]
//! let leader = cluster.wait_for_leader(std::time::Duration::from_secs(5)).await;
//! cluster.stop(0).await; // a member stops (its data stays)
//! cluster.restart(0).await?; // and recovers from its data directory
//! cluster.shutdown().await;
//! # let _ = (endpoints, leader);
//! # Ok(())
//! # }
//! ```

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use picket_storage::RealDisk;

use crate::config::{Config, ForceReleases, Limits, Member, Sessions, StorageSection, Timing};
use crate::node::clock::SystemClock;
use crate::node::durable::EmptyDataDir;
use crate::server::{self, RunningNode, StartError};

/// How to build a dev cluster.
#[derive(Clone, Debug)]
pub struct DevOptions {
    /// Where the members keep their data (`<dir>/node-<id>`); `None`: a temporary directory
    /// removed when the cluster is dropped.
    pub data_dir: Option<PathBuf>,
    /// Client and peer ports of members 1..=3; `None`: free ephemeral ports.
    pub ports: Option<DevPorts>,
    pub timing: Timing,
    pub sessions: Sessions,
    /// How long force-release requests stay approvable (tests of expiry shorten it).
    pub force_releases: ForceReleases,
    /// OIDC for admin calls instead of the insecure dev metadata (tests use a
    /// [`crate::auth::dev::DevIssuer`]'s key file).
    pub oidc: Option<crate::auth::OidcSection>,
    /// `[console]` of every member (e.g. the Alertmanager the console reads alerts from).
    pub console: crate::config::ConsoleSection,
    /// The cluster id (`None`: `picket-dev`; a dev cluster restored from a backup has another,
    /// see [`restore_dev_data`]).
    pub cluster_id: Option<String>,
}

/// Fixed ports of the three members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevPorts {
    pub client: [u16; 3],
    pub peer: [u16; 3],
    /// HTTP (`/metrics`, inspection, `/healthz`).
    pub http: [u16; 3],
}

impl DevPorts {
    /// The ports of `picketd dev`: clients 7401..7403, peers 7411..7413, HTTP 7481..7483.
    pub const DEFAULT: DevPorts = DevPorts {
        client: [7401, 7402, 7403],
        peer: [7411, 7412, 7413],
        http: [7481, 7482, 7483],
    };
}

impl Default for DevOptions {
    /// Temporary directory, ephemeral ports, fast elections (tests).
    fn default() -> Self {
        DevOptions {
            data_dir: None,
            ports: None,
            timing: Timing {
                election_timeout_ms_min: 300,
                election_timeout_ms_max: 600,
                heartbeat_ms: 50,
                read_mode: Default::default(),
            },
            sessions: Sessions::default(),
            force_releases: ForceReleases::default(),
            oidc: None,
            console: Default::default(),
            cluster_id: None,
        }
    }
}

/// Three replicas in this process.
#[derive(Debug)]
pub struct DevCluster {
    _temp: Option<tempfile::TempDir>,
    data_dir: PathBuf,
    configs: Vec<Config>,
    nodes: Vec<Option<RunningNode>>,
}

/// How many times [`DevCluster::start_with`] starts on fresh ephemeral ports when one was taken.
pub const DEV_START_ATTEMPTS: u32 = 5;

/// A free port on 127.0.0.1 (bound then released: another process could take it meanwhile,
/// which tests accept).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `count` distinct free ports on 127.0.0.1: all are bound before any is released, so two of
/// them are never the same port (one-by-one [`free_port`] calls may answer a port twice, and
/// two replicas configured with one port cannot reach each other).
pub fn free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|listener| Ok(listener.local_addr()?.port()))
        .collect()
}

impl DevCluster {
    /// A cluster in a temporary directory on ephemeral ports with fast elections.
    pub async fn start() -> Result<DevCluster, StartError> {
        DevCluster::start_with(DevOptions::default()).await
    }

    /// Starts the cluster. With ephemeral ports and a temporary directory, a port that another
    /// process took between the pick and the bind (`free_port` releases it) is picked again:
    /// up to [`DEV_START_ATTEMPTS`] starts, each on fresh ports in a fresh directory.
    pub async fn start_with(options: DevOptions) -> Result<DevCluster, StartError> {
        let retry = options.ports.is_none() && options.data_dir.is_none();
        let mut attempt = 1;
        loop {
            match DevCluster::start_once(options.clone()).await {
                Err(StartError::Listen { addr, what, source })
                    if retry
                        && attempt < DEV_START_ATTEMPTS
                        && source.kind() == std::io::ErrorKind::AddrInUse =>
                {
                    tracing::warn!(
                        %addr,
                        what,
                        attempt,
                        "dev cluster: a picked port was taken before it was bound; starting again on fresh ports"
                    );
                    attempt += 1;
                }
                started => return started,
            }
        }
    }

    async fn start_once(options: DevOptions) -> Result<DevCluster, StartError> {
        let (temp, data_dir) = match options.data_dir.clone() {
            Some(dir) => (None, dir),
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("picket-dev-")
                    .tempdir()
                    .map_err(|source| StartError::Io {
                        what: "creating a temporary directory",
                        source,
                    })?;
                let dir = temp.path().to_path_buf();
                (Some(temp), dir)
            }
        };
        let ports = match options.ports {
            Some(ports) => ports,
            None => {
                let mut ports = DevPorts {
                    client: [0; 3],
                    peer: [0; 3],
                    http: [0; 3],
                };
                let free = free_ports(9).map_err(|e| listen_error(0, e))?;
                for i in 0..3 {
                    ports.client[i] = free[3 * i];
                    ports.peer[i] = free[3 * i + 1];
                    ports.http[i] = free[3 * i + 2];
                }
                ports
            }
        };
        let members = ports.members();
        let configs: Vec<Config> = members
            .iter()
            .map(|m| member_config(&options, &data_dir, &members, m, false))
            .collect();
        for config in &configs {
            config.validate().map_err(|e| StartError::Address {
                field: "dev",
                rule: e.to_string(),
            })?;
        }
        let mut cluster = DevCluster {
            _temp: temp,
            data_dir,
            configs,
            nodes: vec![None, None, None],
        };
        for i in 0..3 {
            if let Err(error) = cluster.restart(i).await {
                cluster.shutdown_members().await;
                return Err(error);
            }
        }
        Ok(cluster)
    }

    pub fn len(&self) -> usize {
        self.configs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.configs.is_empty()
    }

    /// The client endpoints (`http://127.0.0.1:PORT`) of every member started (1..=3, then
    /// those [`DevCluster::start_joiner`] started), in order.
    pub fn client_endpoints(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.client_endpoint(i)).collect()
    }

    /// The client endpoint of member `index` (0-based; its node id is `index + 1`).
    pub fn client_endpoint(&self, index: usize) -> String {
        format!("http://{}", self.configs[index].me().client_address)
    }

    /// The HTTP base URL (`http://127.0.0.1:PORT`) of member `index`.
    pub fn http_endpoint(&self, index: usize) -> String {
        let addr = self.configs[index]
            .http_listen
            .expect("dev members always listen for HTTP");
        format!("http://{addr}")
    }

    pub fn config(&self, index: usize) -> &Config {
        &self.configs[index]
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn is_running(&self, index: usize) -> bool {
        self.nodes[index].is_some()
    }

    /// The running member `index`, if it runs.
    pub fn node(&self, index: usize) -> Option<&RunningNode> {
        self.nodes[index].as_ref()
    }

    /// Stops member `index` (gracefully; its data stays). No-op if stopped.
    pub async fn stop(&mut self, index: usize) {
        if let Some(node) = self.nodes[index].take() {
            if let Err(error) = node.shutdown().await {
                tracing::error!(%error, "member stopped with an error");
            }
        }
    }

    /// Starts member `index` again from its data directory (no-op if it runs).
    pub async fn restart(&mut self, index: usize) -> Result<(), StartError> {
        if self.nodes[index].is_some() {
            return Ok(());
        }
        let node = server::start(
            &self.configs[index],
            RealDisk,
            SystemClock::new(),
            EmptyDataDir::Init,
        )
        .await?;
        self.nodes[index] = Some(node);
        Ok(())
    }

    /// The index of the member that is leader and ready (caught up), if any.
    pub async fn leader(&self) -> Option<usize> {
        for (i, node) in self.nodes.iter().enumerate() {
            if let Some(node) = node {
                if node.status().await.is_some_and(|s| s.ready_leader) {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Waits up to `timeout` for a ready leader that is still the leader an election timeout
    /// later (right after start, duelling candidates may depose a first leader).
    pub async fn wait_for_leader(&self, timeout: Duration) -> Option<usize> {
        let deadline = tokio::time::Instant::now() + timeout;
        let settle = Duration::from_millis(self.configs[0].timing.election_timeout_ms_max);
        loop {
            if let Some(leader) = self.leader().await {
                tokio::time::sleep(settle).await;
                if self.leader().await == Some(leader) {
                    return Some(leader);
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn shutdown_members(&mut self) {
        for i in 0..self.nodes.len() {
            self.stop(i).await;
        }
    }

    /// Stops every member.
    pub async fn shutdown(mut self) {
        self.shutdown_members().await;
    }
}

fn listen_error(port: u16, source: std::io::Error) -> StartError {
    StartError::Listen {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        what: "free port",
        source,
    }
}

/// The configuration of dev member `me` among `members` (its HTTP address is `me`'s). With
/// `join`, `members` are the seeds it reaches the cluster by, itself included.
fn member_config(
    options: &DevOptions,
    data_dir: &Path,
    members: &[Member],
    me: &Member,
    join: bool,
) -> Config {
    let http = me
        .http_address
        .as_deref()
        .and_then(|a| a.parse::<SocketAddr>().ok());
    Config {
        cluster_id: options
            .cluster_id
            .clone()
            .unwrap_or_else(|| DEV_CLUSTER_ID.to_owned()),
        node_id: me.id,
        data_dir: data_dir.join(format!("node-{}", me.id)),
        client_listen: None,
        peer_listen: None,
        insecure_dev_auth: options.oidc.is_none(),
        oidc: options.oidc.clone(),
        http_listen: http,
        external_url: None,
        members: members.to_vec(),
        join,
        timing: options.timing.clone(),
        sessions: options.sessions.clone(),
        force_releases: options.force_releases.clone(),
        limits: Limits::default(),
        storage: StorageSection {
            preallocate_bytes: 0,
            ..StorageSection::default()
        },
        tls: None,
        auth: Default::default(),
        console: options.console.clone(),
        backup: None,
        faults: picket_core::faults::Faults::NONE,
    }
}

/// The cluster id of a dev cluster that was not restored from a backup.
pub const DEV_CLUSTER_ID: &str = "picket-dev";

/// The cluster id a dev cluster in `data_dir` was restored with (`None`: never restored, or no
/// data yet), from its first member's data directory (`crate::backup::CLUSTER_ID_FILE`).
pub fn restored_cluster_id(data_dir: &Path) -> Option<String> {
    let path = data_dir.join("node-1").join(crate::backup::CLUSTER_ID_FILE);
    std::fs::read_to_string(path)
        .ok()
        .map(|id| id.trim().to_owned())
}

/// Writes the data directories of the three members of a dev cluster in `data_dir` (which must
/// hold no member's data) as replicas of a new cluster restored from `backup_file`, with the
/// default revision bump (`crate::backup::BUMP_REVISION_DEFAULT`). The new cluster id is
/// `picket-dev-r<REVISION>`: another than the backup's. The members are on `options.ports`
/// (`None`: `picketd dev`'s, [`DevPorts::DEFAULT`]), which the restore records as the new
/// cluster's first membership: start the restored cluster on the same ports. Returns what was
/// restored (the same for every member).
pub fn restore_dev_data(
    options: &DevOptions,
    data_dir: &Path,
    backup_file: &Path,
) -> Result<crate::backup::Restored, String> {
    use crate::backup::{read_backup_file, restore_data_dir, restore_floor, BUMP_REVISION_DEFAULT};
    let backup = read_backup_file(backup_file)?;
    let floor = restore_floor(&backup, &[], BUMP_REVISION_DEFAULT)?;
    let options = DevOptions {
        cluster_id: Some(format!("picket-dev-r{}", floor.revision.0)),
        ..options.clone()
    };
    let members = options.ports.unwrap_or(DevPorts::DEFAULT).members();
    let mut restored = None;
    for me in &members {
        let config = member_config(&options, data_dir, &members, me, false);
        restored = Some(restore_data_dir(&config, &backup, floor.revision)?);
    }
    Ok(restored.expect("three members"))
}

/// Most members a dev cluster grows to (ids 1..=9, as a cluster file may list).
pub const DEV_MEMBERS_MAX: u64 = 9;

/// The configuration of a replica that joins the dev cluster whose first three members are
/// `seeds` (`join = true`): member `id` (4..=9) at `ports` (client, peer, HTTP), its data in
/// `<data_dir>/node-<id>`. It starts as nobody's member: the cluster adds it with
/// `picketctl cluster add` and it follows the log as a learner until promoted.
pub fn joiner_config(
    options: &DevOptions,
    data_dir: &Path,
    seeds: &[Member],
    id: u64,
    ports: (u16, u16, u16),
) -> Result<Config, String> {
    if !(4..=DEV_MEMBERS_MAX).contains(&id) {
        return Err(format!(
            "a replica that joins the dev cluster has id 4..={DEV_MEMBERS_MAX} (1..=3 are the \
             cluster's own), not {id}"
        ));
    }
    let me = Member {
        id,
        peer_address: format!("127.0.0.1:{}", ports.1),
        client_address: format!("127.0.0.1:{}", ports.0),
        http_address: Some(format!("127.0.0.1:{}", ports.2)),
    };
    let mut members: Vec<Member> = seeds.iter().filter(|m| m.id != id).cloned().collect();
    members.push(me.clone());
    let config = member_config(options, data_dir, &members, &me, true);
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

impl DevPorts {
    /// The fixed ports of dev member `id` (1..=9): client 7400 + id, peer 7410 + id, HTTP
    /// 7480 + id.
    pub fn of_member(id: u64) -> (u16, u16, u16) {
        let id = u16::try_from(id.min(DEV_MEMBERS_MAX)).expect("at most 9");
        (7400 + id, 7410 + id, 7480 + id)
    }

    /// Members 1..=3 at these ports (the seeds a joining replica reaches the cluster by).
    pub fn members(&self) -> Vec<Member> {
        (0..3)
            .map(|i| Member {
                id: i as u64 + 1,
                peer_address: format!("127.0.0.1:{}", self.peer[i]),
                client_address: format!("127.0.0.1:{}", self.client[i]),
                http_address: Some(format!("127.0.0.1:{}", self.http[i])),
            })
            .collect()
    }
}

impl DevCluster {
    /// Starts, in this process, a replica that joins the cluster as member `id` (4..=9) on
    /// free ports: it is not a member until the cluster adds it (`Admin.AddMember` with the
    /// addresses of [`Self::config`] of the returned index). Returns its index.
    pub async fn start_joiner(
        &mut self,
        options: &DevOptions,
        id: u64,
    ) -> Result<usize, StartError> {
        let free = free_ports(3).map_err(|e| listen_error(0, e))?;
        let seeds: Vec<Member> = self.configs[..3].iter().map(|c| c.me().clone()).collect();
        let config = joiner_config(
            options,
            &self.data_dir,
            &seeds,
            id,
            (free[0], free[1], free[2]),
        )
        .map_err(|rule| StartError::Address { field: "dev", rule })?;
        self.configs.push(config);
        self.nodes.push(None);
        let index = self.configs.len() - 1;
        self.restart(index).await?;
        Ok(index)
    }
}
